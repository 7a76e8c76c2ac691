"""What fingerprints cost: a recorded pass with fingerprints, and a live pass `--against` a reference,
each against a recorded pass without fingerprints, in one run.

    python benchmarks/bench_diff.py [--layers L] [--rounds R] [--width D] [--other OLD_VALUES.py]

A 4-layer d=256 encoder (bench.py's; `--width 64`: d=64), batch 8x32, torch on one thread: each round times one
backward under a Session with a Recorder attached (every pass recorded node by node, full
statistics) without fingerprints, with them, and live against a reference recording of the
same pass (`break differs>1e-6` armed, never hit: every node's fingerprints read back and
compared; no recording), and with fingerprints whose every sketch is a constant (`floor`: the
pass's bookkeeping and plumbing, no device work: what no sketch can go under), and with
fingerprints whose every sketch is a constant beside one read of the value (`floor + one read`:
its norm), in an order that alternates. Medians, their ratio and the median of the per-round
ratios are printed, of wall-clock and of this process's CPU time (steadier on a loaded
machine). Targets: fingerprints <= 1.25x at d=256 and <= 1.35x at d=64, `--against` <= 1.3x.
The sketch is the compiled posthooks' where they are built (gradtui.engine.hooks.native), as a run's is. benchmarks/bench_sketches.py puts other sketches in
the same place. Last, the fingerprints' own bookkeeping alone: the CPU time per pass inside
PassPrints (its per-node calls and its end: the read back, the events), every sketch a constant,
median over 20 recorded passes of one graph (its plan made at the first: gradtui.engine.fingerprints.plan).
`--other FILE`: a copy of gradtui/engine/fingerprints/values.py (`git show main:gradtui/engine/fingerprints/values.py
> old.py`) whose PassPrints records one more pass per round (`other`), so two versions of the
bookkeeping are compared paired, in the same rounds (the median of the per-round ratios).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gradtui.engine.fingerprints import sketch  # noqa: E402
from gradtui.engine.fingerprints import values as fingerprint_module  # noqa: E402
from gradtui.engine.session import Session  # noqa: E402
from gradtui.protocol import events as ev  # noqa: E402
from gradtui.protocol.breakpoints import parse_spec  # noqa: E402
from gradtui.record.against import Reference  # noqa: E402
from gradtui.record.store import Recorder  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import transformer  # noqa: E402


class Took(NamedTuple):
    """One timed backward: wall-clock seconds and this process's CPU seconds (steadier on a
    loaded machine: time spent waiting for a core is not counted)."""

    wall: float
    cpu: float


def one_pass(
    model: torch.nn.Module, x: torch.Tensor, fingerprints: bool, db: str | None, against: str | None = None
) -> Took:
    """One backward timed (forward not timed): recorded into `db` (with fingerprints or not),
    or live against the recording `against` (not recorded)."""
    recorder = Recorder(db) if db is not None else lambda event: None
    session = Session(full_stats=True, fingerprints=fingerprints or against is not None)
    if against is not None:
        session.against = Reference(against)
        session.breakpoints.add(parse_spec("differs>1e-6"))
    session.add_listener(recorder)
    session.run_on()
    session.install()
    try:
        recorder(ev.ScriptStarted("bench", ()))  # the run row
        loss = model(x).pow(2).mean()
        gc.collect()
        start, cpu = time.perf_counter(), time.process_time()
        loss.backward()
        took = Took(time.perf_counter() - start, time.process_time() - cpu)
    finally:
        session.uninstall()
        if db is not None:
            recorder.close()
        if session.against is not None:
            session.against.close()
    model.zero_grad(set_to_none=True)
    return took


_CONSTANT = sketch.Row(torch.zeros(()), torch.zeros(sketch.K), False)


def constant(t: torch.Tensor) -> sketch.Row:
    """A value's fingerprint with no device work (a small one's values as ever): the floor."""
    return sketch.fingerprint(t) if t.numel() <= sketch.EXACT_LIMIT else _CONSTANT


def one_read(t: torch.Tensor) -> sketch.Row:
    """A value's fingerprint as one read of it (its norm) and a constant sketch: the floor plus
    what no sketch of every element can go under."""
    if t.numel() <= sketch.EXACT_LIMIT:
        return sketch.fingerprint(t)
    with torch.no_grad():
        return sketch.Row(torch.linalg.vector_norm(t), _CONSTANT.body, False)


@contextmanager
def no_sketch(mechanism: Callable[[torch.Tensor], sketch.Row] = constant) -> Iterator[None]:
    """Fingerprints whose every sketch is `mechanism`'s (a constant), within the block."""
    fingerprint_module.fingerprint = mechanism
    try:
        yield
    finally:
        fingerprint_module.fingerprint = sketch.fingerprint


@contextmanager
def prints_of(module: ModuleType) -> Iterator[None]:
    """Fingerprints gathered by `module`'s PassPrints (another version of values.py), within the block."""
    mine = fingerprint_module.PassPrints
    fingerprint_module.PassPrints = module.PassPrints  # type: ignore[misc] - a session looks it up per pass
    try:
        yield
    finally:
        fingerprint_module.PassPrints = mine  # type: ignore[misc]


def load_values(path: str) -> ModuleType:
    """A copy of values.py loaded as a module of its own."""
    spec = importlib.util.spec_from_file_location("other_values", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bookkeeping(layers: int, passes: int = 20, width: int = 256) -> tuple[float, float]:
    """Median CPU seconds per recorded pass inside PassPrints.node and PassPrints.event, every
    sketch a constant (after 3 passes of warm-up), at d=`width`."""
    model = transformer(layers, width)
    x = torch.randn(8, 32, width, generator=torch.Generator().manual_seed(1))
    spent = {"node": 0.0, "event": 0.0}
    originals = {name: getattr(fingerprint_module.PassPrints, name) for name in spent}

    def timed(name: str):  # noqa: ANN202 - a wrapper of either method
        method = originals[name]

        def run(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            start = time.process_time()
            try:
                return method(*args, **kwargs)
            finally:
                spent[name] += time.process_time() - start

        return run

    per: dict[str, list[float]] = {name: [] for name in spent}
    try:
        for name in spent:
            setattr(fingerprint_module.PassPrints, name, timed(name))
        with tempfile.TemporaryDirectory() as folder, no_sketch():
            for i in range(passes + 3):
                spent.update(node=0.0, event=0.0)
                one_pass(model, x, True, os.path.join(folder, f"{i}.db"))
                for name in spent if i >= 3 else ():
                    per[name].append(spent[name])
    finally:
        for name, method in originals.items():
            setattr(fingerprint_module.PassPrints, name, method)
    return statistics.median(per["node"]), statistics.median(per["event"])


def report(label: str, times: dict[str, list[Took]], target: float | None, note: str = "a floor") -> None:
    """Medians of the plain recording and of `label`, their ratio and the median of the paired
    (same round) ratios, wall and CPU (`target` None: no target, `note` said instead)."""
    for kind in ("wall", "cpu"):
        base = [getattr(t, kind) for t in times["recorded"]]
        other = [getattr(t, kind) for t in times[label]]
        paired = statistics.median(o / b for o, b in zip(other, base))
        print(
            f"  {label:16} {kind:4}: recorded {statistics.median(base) * 1e3:8.1f} ms, with "
            f"{statistics.median(other) * 1e3:8.1f} ms: {statistics.median(other) / statistics.median(base):.2f}x,"
            f" paired {paired:.2f}x" + (f" (target <= {target}x)" if target is not None else f" ({note})")
        )


KINDS = ("recorded", "fingerprints", "against", "floor", "floor + one read")


def measure(
    layers: int, rounds: int, width: int = 256, kinds: tuple[str, ...] = KINDS, other: ModuleType | None = None
) -> dict[str, list[Took]]:
    """Each round's backward passes of `kinds` (after a round of warm-up), in alternating order
    (`other`: a kind "other", fingerprints by that version of values.py)."""
    model = transformer(layers, width)
    x = torch.randn(8, 32, width, generator=torch.Generator().manual_seed(1))
    times: dict[str, list[Took]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory() as folder:
        reference = os.path.join(folder, "reference.db")
        one_pass(model, x, True, reference)
        for r in range(rounds + 1):
            for kind in kinds if r % 2 else kinds[::-1]:
                db = None if kind == "against" else os.path.join(folder, f"{r}-{kind}.db")
                if kind.startswith("floor"):
                    with no_sketch(constant if kind == "floor" else one_read):
                        took = one_pass(model, x, True, db)
                elif kind == "other":
                    assert other is not None
                    with prints_of(other):
                        took = one_pass(model, x, True, db)
                else:
                    took = one_pass(model, x, kind == "fingerprints", db, reference if kind == "against" else None)
                if r:  # the first round warms up
                    times[kind].append(took)
    return times


def bench_diff(layers: int, rounds: int) -> None:
    """bench.py's rows (its `record` group): the fingerprints' ratios, of CPU time, paired with
    their baseline (a recorded pass without fingerprints) in the same rounds, at d=256 and d=64,
    beside their floors."""
    from benchtable import paired_row

    for width, target in ((256, 1.25), (64, 1.35)):
        kinds = KINDS if width == 256 else ("recorded", "fingerprints", "floor", "floor + one read")
        times = measure(layers, rounds, width, kinds)
        sizes = f"one backward, {layers}-layer encoder d={width}, batch 8x32, CPU time"
        base = [t.cpu for t in times["recorded"]]
        rows = [("recording with fingerprints (--record DB --fingerprints)", "fingerprints", target)]
        if width == 256:
            rows.append(("a live pass --against REF.db, break differs>1e-6 armed (not hit)", "against", 1.3))
        rows += [
            ("floor: fingerprints, every sketch a constant (what no sketch goes under)", "floor", None),
            ("floor + one read: every sketch a constant, each value's norm taken", "floor + one read", None),
        ]
        for figure, kind, goal in rows:
            paired_row(figure, sizes, [t.cpu for t in times[kind]], base, goal, "recorded pass")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--other")
    options = parser.parse_args()
    torch.set_num_threads(1)  # the machines are small and noisy; one thread is steadier
    other = load_values(options.other) if options.other else None
    kinds = KINDS + (("other",) if other is not None else ())
    times = measure(options.layers, options.rounds, options.width, kinds, other)
    print(
        f"one backward, {options.layers}-layer encoder d={options.width}, batch 8x32, {options.rounds} rounds, "
        f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; against a recorded one without fingerprints; "
        f"sketch: {'compiled' if sketch.compiled() is not None else 'Python'}"
    )
    report("fingerprints", times, 1.25 if options.width >= 256 else 1.35)
    report("against", times, 1.3)
    report("floor", times, None)
    report("floor + one read", times, None)
    if other is not None:
        report("other", times, None, "fingerprints by --other's PassPrints")
        paired = statistics.median(a.cpu / b.cpu for a, b in zip(times["fingerprints"], times["other"]))
        print(f"  fingerprints / other, cpu, paired: {paired:.3f}")
    node, end = bookkeeping(options.layers, width=options.width)
    print(
        f"  bookkeeping: PassPrints per pass, every sketch a constant: {node * 1e3:.2f} ms in its per-node calls,"
        f" {end * 1e3:.2f} ms at its end (CPU time, median of 20 passes, d={options.width})"
    )


if __name__ == "__main__":
    main()
