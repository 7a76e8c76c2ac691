"""The fingerprint mechanisms side by side: what each costs and what it sees.

    python benchmarks/bench_sketches.py [--rounds R] [--width D] [--accuracy] [--hot-cold] [--earlier REV] [--only NAME]...

Cost: bench_diff.py's model and pass (a 4-layer d=256 encoder, `--width 64`: d=64, batch 8x32, torch on one
thread, one recorded backward under a Session with a Recorder, full statistics). Each round
times one backward per mechanism, in an order that alternates; CPU-time medians and the median
of the per-round ratios against a recorded pass without fingerprints. A mechanism replaces
gradtui.engine.fingerprints.values.fingerprint, the one place a value is sketched, so the bookkeeping
around it (what each node saved, which print a node may reuse, the pass's one read, the rows
written) is the engine's own:

- `plumbing`: fingerprints on (the hook plan's extra hooks, the calls), PassPrints doing nothing;
- `bookkeeping`: PassPrints as it is, each value's sketch a constant (no device work);
- `full (sketch 3)`: gradtui.engine.fingerprints.sketch, every element read (by the compiled
  posthooks' one-read sketch where they are built: the run's own choice);
- `full, Python only`: the same sketch made by its Python code alone (the same float32 numbers);
- `sampled S, folded`: S positions fixed per shape (the same for a matrix and its transpose),
  `torch.take` in logical order, times fixed signs, summed into 8 entries, with the sample's
  norm; ‖a − b‖ / ‖a‖ estimated as ‖S(a) − S(b)‖ / ‖a_S‖;
- `sampled 64, stored`: the 64 sampled values themselves (8x the numbers to read and write);
- `earlier REV`: with `--earlier REV`, the compiled sketch of commit REV
  (benchmarks/earlier_sketch.py builds it beside this one: `--earlier main` before sketch 3 times
  sketch 2 as the compiled posthooks made it) in the same rounds; `earlier REV, Python only`: that
  commit's Python sketch.

`--accuracy`: the accuracy target's 1,000 random pairs (within 2x of the exact ‖a − b‖ / ‖a‖) and a sparse
difference (one element, one row, one column changed) of two of the model's shapes: how often
the estimate sees it at all, and how often within 2x. `--hot-cold`: the full sketch of one
value hot in cache against the same value after 256 MB were written (item 1b's premise).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import earlier_sketch  # noqa: E402
from bench_diff import constant, one_pass  # noqa: E402
from bench_models import transformer  # noqa: E402

from gradtui.engine.fingerprints import sketch as sk  # noqa: E402
from gradtui.engine.fingerprints import values as fpmod  # noqa: E402
from gradtui.protocol import events as ev  # noqa: E402
from gradtui.protocol.fingerprints import estimate_distance  # noqa: E402
from tests.helpers import one_changed  # noqa: E402

FULL = fpmod.fingerprint
_positions: dict[tuple[int, int, int], torch.Tensor] = {}
_folds: dict[tuple[int, torch.dtype], torch.Tensor] = {}
_NO_NORM = torch.zeros(())


def positions(shape: tuple[int, ...], s: int) -> torch.Tensor:
    """`s` logical row-major positions in `shape`, fixed per its 2-D form (sketch.shape2d) and
    the same cells for a matrix and its transpose (drawn in the canonical orientation, the long
    side first); a square's `2 s`: each cell and its mirror (summed: transpose-invariant)."""
    rows, cols = sk.shape2d(shape)
    key = (rows, cols, s)
    found = _positions.get(key)
    if found is None:
        flipped = rows < cols
        first, second = (cols, rows) if flipped else (rows, cols)
        salt = (first * 1_000_003 + second) & 0xFFFFFF
        k = torch.arange(s, dtype=torch.int64)
        i = sk._hash_signs(k, salt * 2 + 11, bits=True) % first
        j = sk._hash_signs(k, salt * 2 + 12, bits=True) % second
        if first == second:
            found = torch.cat([i * cols + j, j * cols + i])
        else:
            found = j * cols + i if flipped else i * cols + j
        _positions[key] = found
    return found


def _fold_matrix(s: int, dtype: torch.dtype) -> torch.Tensor:
    """(s, K): sample k adds to entry k mod K with a fixed sign."""
    found = _folds.get((s, dtype))
    if found is None:
        m = torch.zeros(s, sk.K, dtype=torch.float64)
        m[torch.arange(s), torch.arange(s) % sk.K] = sk.hashed_signs(s, salt=9)
        found = _folds[(s, dtype)] = m.to(dtype)
    return found


def _sample(t: torch.Tensor, s: int) -> torch.Tensor:
    t = sk._real(t.detach())
    idx = positions(tuple(t.shape), s)
    x = torch.take(t, idx)
    if idx.numel() != s:
        x = x.view(2, s).sum(0)
    return x.to(torch.float64 if t.dtype == torch.float64 else torch.float32)


def sampled_folded(s: int) -> Callable[[torch.Tensor], sk.Row]:
    """The sampled sketch: `s` sampled values folded into K signed entries, the sample's norm."""

    def fingerprint(t: torch.Tensor) -> sk.Row:
        if t.numel() <= sk.EXACT_LIMIT:
            return FULL(t)
        with torch.no_grad():
            x = _sample(t, s)
            return sk.Row(torch.linalg.vector_norm(x), x @ _fold_matrix(s, x.dtype), False)

    return fingerprint


def sampled_stored(s: int) -> Callable[[torch.Tensor], sk.Row]:
    """The `s` sampled values themselves (the norm left out: the host would scale the sample's)."""

    def fingerprint(t: torch.Tensor) -> sk.Row:
        if t.numel() <= sk.EXACT_LIMIT:
            return FULL(t)
        with torch.no_grad():
            return sk.Row(_NO_NORM, _sample(t, s), False)

    return fingerprint


PLUMBING = "plumbing"
MECHANISMS: dict[str, Callable[[torch.Tensor], sk.Row] | str | None] = {
    "recorded": None,
    PLUMBING: PLUMBING,
    "bookkeeping": constant,
    "full (sketch 3)": FULL,
    "full, Python only": sk.python_fingerprint,
    "sampled 256, folded": sampled_folded(256),
    "sampled 1024, folded": sampled_folded(1024),
    "sampled 64, stored": sampled_stored(64),
}
_methods = (fpmod.PassPrints.node, fpmod.PassPrints.event)


def _use(mechanism: Callable[[torch.Tensor], sk.Row] | str | None) -> None:
    """Put `mechanism` in place (`plumbing`: PassPrints doing nothing)."""
    if mechanism == PLUMBING:
        fpmod.PassPrints.node = lambda self, *a, **k: None  # type: ignore[method-assign]
        fpmod.PassPrints.event = lambda self, index: ev.PassPrints(index, ())  # type: ignore[method-assign]
    else:
        fpmod.PassPrints.node, fpmod.PassPrints.event = _methods  # type: ignore[method-assign]
    fpmod.fingerprint = mechanism if callable(mechanism) else FULL


def cost(rounds: int, width: int = 256) -> None:
    """Each mechanism's recorded backward, paired and alternated (see module doc)."""
    model = transformer(4, width)
    x = torch.randn(8, 32, width, generator=torch.Generator().manual_seed(1))
    names = list(MECHANISMS)
    times: dict[str, list[float]] = {n: [] for n in names}
    sizes: dict[str, int] = {}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as folder:
        for r in range(rounds + 1):
            for name in names if r % 2 else names[::-1]:
                _use(MECHANISMS[name])
                db = os.path.join(folder, f"{r}.db")
                took = one_pass(model, x, MECHANISMS[name] is not None, db)
                if r:  # the first round warms up
                    times[name].append(took.cpu)
                sizes[name] = os.path.getsize(db)
                os.remove(db)
            load.append(os.getloadavg()[0])
    _use(FULL)
    print(
        f"cost: one recorded backward, d={width}, {rounds} rounds, load {min(load):.1f}-{max(load):.1f} on {os.cpu_count()} "
        "cores, CPU-time medians against a recorded pass without fingerprints"
    )
    base = times["recorded"]
    for name in names:
        paired = statistics.median(o / b for o, b in zip(times[name], base))
        print(
            f"  {name:22} {statistics.median(times[name]) * 1e3:6.1f} ms "
            f"{statistics.median(times[name]) / statistics.median(base):5.2f}x  paired {paired:5.2f}x  "
            f"recording {sizes[name] / 1024:5.0f} KiB"
        )


def _exact(a: torch.Tensor, b: torch.Tensor) -> float:
    return (torch.linalg.vector_norm(a - b) / max(torch.linalg.vector_norm(a), torch.linalg.vector_norm(b))).item()


def _estimate(fingerprint: Callable[[torch.Tensor], sk.Row]) -> Callable[[torch.Tensor, torch.Tensor], float]:
    def relative(a: torch.Tensor, b: torch.Tensor) -> float:
        ra, rb = sk.read_rows([fingerprint(a), fingerprint(b)])
        scale = max(ra.norm, rb.norm)
        return estimate_distance(ra.data, rb.data) / scale if scale > 0 else 0.0

    return relative


def _pairs(relative: Callable[[torch.Tensor, torch.Tensor], float]) -> float:
    """tests/engine/test_fingerprint.py's 1,000 random pairs: % within 2x."""
    g = torch.Generator().manual_seed(1234)
    within = 0
    for i in range(1000):
        shape = ((3 + i % 7) * 11, 2 + i % 5)
        a = torch.randn(shape, generator=g, dtype=torch.float64)
        scale = 10.0 ** float(torch.empty(()).uniform_(-6, 0, generator=g))
        b = a + scale * torch.randn(shape, generator=g, dtype=torch.float64)
        within += 0.5 <= relative(a, b) / _exact(a, b) <= 2
    return within / 10


def _sparse(
    relative: Callable[[torch.Tensor, torch.Tensor], float], kind: str, shape: tuple[int, ...], trials: int = 100
) -> str:
    """One element, row or column of a random value changed: % seen at all, % within 2x."""
    g = torch.Generator().manual_seed(7)
    seen = within = 0
    for _ in range(trials):
        a, b = one_changed(shape, kind, g)
        estimate, exact = relative(a, b), _exact(a, b)
        seen += estimate > 0
        within += 0.5 <= estimate / exact <= 2
    return f"{100 * seen / trials:3.0f}% seen, {100 * within / trials:3.0f}% within 2x"


def accuracy() -> None:
    """Each sketching mechanism's accuracy (see module doc)."""
    for name in ("full (sketch 3)", *[n for n in MECHANISMS if n.startswith("earlier")], "sampled 256, folded"):
        mechanism = MECHANISMS.get(name)
        if mechanism is None:
            continue
        assert callable(mechanism)
        relative = _estimate(mechanism)
        print(f"accuracy, {name}: 1,000 random pairs within 2x: {_pairs(relative):.1f}%")
        for shape in ((1024, 256), (8, 32, 1024)):
            for kind in ("element", "row", "column"):
                print(f"    {str(shape):14} one {kind:7} changed: {_sparse(relative, kind, shape)}")


def hot_cold() -> None:
    """The full sketch of a value hot in cache, and cold (after 256 MB were written)."""
    evict = torch.empty(64 << 20)
    for shape in ((8, 32, 1024), (8, 32, 256)):
        hot, cold = [], []
        for v in [torch.randn(shape) for _ in range(40)]:
            sk.fingerprint(v)
            start = time.perf_counter()
            sk.fingerprint(v)
            hot.append(time.perf_counter() - start)
            evict.fill_(1.0)
            start = time.perf_counter()
            sk.fingerprint(v)
            cold.append(time.perf_counter() - start)
        print(
            f"hot/cold, full sketch of {shape}: hot {statistics.median(hot) * 1e6:.0f} us, "
            f"cold {statistics.median(cold) * 1e6:.0f} us"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--accuracy", action="store_true")
    parser.add_argument("--hot-cold", action="store_true")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--earlier", metavar="REV", help="also time commit REV's compiled sketch")
    parser.add_argument("--only", action="append", metavar="NAME", help="time this mechanism (repeated; default: all)")
    options = parser.parse_args()
    torch.set_num_threads(1)
    if options.earlier and (module := earlier_sketch.load(options.earlier)) is not None:
        MECHANISMS[f"earlier {options.earlier}"] = earlier_sketch.mechanism(module)
    if options.earlier and (module := earlier_sketch.load_python(options.earlier)) is not None:
        MECHANISMS[f"earlier {options.earlier}, Python only"] = earlier_sketch.python_mechanism(module)
    if options.only:
        wanted = {"recorded", *options.only}
        for name in [n for n in MECHANISMS if n not in wanted]:
            del MECHANISMS[name]
    cost(options.rounds, options.width)
    if options.accuracy:
        accuracy()
    if options.hot_cold:
        hot_cold()


if __name__ == "__main__":
    main()
