"""gradtui's performance figures, as ratios against baselines measured in the same run.

    python benchmarks/bench.py            # every figure, the targets' model sizes (~17 min on 2 cores)
    python benchmarks/bench.py --quick    # smaller models and fewer repeats: a smoke run (< 1 min)
    python benchmarks/bench.py --only capture,ui   # some groups (capture backward forward small wire ui
                                                # memory bigtensor headless record)

The capture baseline is torchviz's `make_dot(show_saved=True)` (`pip install '.[bench]'`);
without torchviz that row prints our time and no ratio. Everything else needs only
gradtui's own dependencies. Torch runs on one thread (these machines are small and noisy)
and every time is a median; gradtui runs and their baselines are interleaved where they
can be, so both see the same noise, and where they are (the backward and floor rows) the ratio is
the median of the pairs' ratios (benchtable.paired_row: these hosts' speed drifts by half between
minutes, and two separate medians can come from different speeds).

Targets (the performance targets, docs/performance.md): backward in `continue` + a `nan`
watch <= 1.35x plain at d=64 (tiny tensors: the per-node cost) and <= 1.10x at d=256; `continue`
without a watch (the UI's statistics) <= 1.3x / <= 1.08x; every statistic (a report, a recording)
<= 1.5x / <= 1.1x; forward with provenance <= 1.15x plain at d=64 and <= 1.05x at d=256
(bench_provenance.py's rows, in the `forward` group, with anomaly mode's forward beside them);
capture in `continue` (lazy) <= 0.1x torchviz's make_dot on the 48-layer encoder (capture with
every node's metadata keeps the earlier <= 0.5x); a 100,000-node chain's first pause <= 5 s,
its pass in `continue` + `nan` <= 2x plain, its memory <= 2x; the whole process `--headless -c
continue` <= 1.03x `python`; `--record` <= 1.3x and `--flight 5` <= 1.2x; host reads per node
<= 0.05 without a watch and <= 0.2 with one (counts); in the UI with a 10,000-node pass, the
`s` key to the next node drawn <= 50 ms median and the pass drawn <= 1 s after its backward
call; RSS grows < 50 MB over 200 training passes with no graph kept alive; the peak RSS of a
500,000-mul chain (first pause, then `continue` + `nan`) and of 100,000 leaves summed under
`--headless -c 'break nan' -c continue --record` <= 1.5x plain's (bench_memory.py); a
100-million-element gradient is summarized in bounded time and memory, never copied to Python;
a 500-step headless loop stopping at `break pass 400` runs its earlier passes <= 1.5x plain.
The floors stand beside the targets they bound: a no-op prehook + posthook on every node, a
no-op posthook on the planned nodes only, the Python prototype (those posthooks taking each
norm and checking it, a bare walk, no removal: the mechanism without gradtui's own work) and the
same posthooks compiled (bench_compiled.py, where a compiler and ninja are at hand), one fused
norm of every gradient a pass made, a no-op TorchFunctionMode with global module hooks. The
`wire` group (bench_agent.py) sizes and times a 10,000-node graph frame and counts
frames per second while NodeRan events stream through a real AgentServer (<= ~20/s); the `ui`
rows run against a child agent. The `record` group ends with the fingerprints' rows (bench_diff.py): a
recorded backward with fingerprints <= 1.25x one without at d=256 and <= 1.35x at d=64, a live
pass `--against` a reference <= 1.3x, and beside them their floors (the fingerprints'
bookkeeping, every sketch a constant; the same plus one read of every value), process CPU
time, each paired with its baseline round by round. Timing thresholds are never asserted in the unit tests.

The backward rows' session has one listener that takes a planned pass's NodesRan batches
unread and reads no flow (no client attached, no report): what a pass costs the script's thread
when nobody looks at its nodes; the row "... a listener reading every node and the flow" beside
them is what a client that reads everything costs on top. The every-statistic row's listener
reads every node and the flow, as a report or a recording does.

The capture, backward and floor rows (and the 100k chain's passes) time the calling thread's CPU
(`time.thread_time()`: torch runs on that one thread here, and the hooks on the thread that called
backward), so other processes' load on a shared machine does not enter their ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gradtui.engine.capture.graph import Names, capture  # noqa: E402
from gradtui.engine.hooks.compiled import CompiledHooks  # noqa: E402
from gradtui.engine.provenance.forward import Provenance  # noqa: E402
from gradtui.engine.session import Session  # noqa: E402
from gradtui.protocol import events as ev  # noqa: E402
from gradtui.protocol.commands import parse  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_agent import bench_agent_rows, bench_ui, bench_wire  # noqa: E402
from bench_core import bench_chain, bench_floor, bench_headless_continue, bench_host_reads  # noqa: E402
from bench_memory import bench_peaks  # noqa: E402
from bench_models import D_MODEL, model_sizes, transformer  # noqa: E402
from bench_process import (  # noqa: E402
    bench_big_tensor,
    bench_headless,
    bench_headless_backward,
    bench_memory,
    bench_record,
)
from benchtable import Row, add, median, ms, paired_row, print_table, ratio_row  # noqa: E402

# ---- models ------------------------------------------------------------------------------

# ---- capture vs torchviz -----------------------------------------------------------------


def bench_capture(
    layers: int, batch: tuple[int, int], repeat: int, target: float = 0.2, lazy_target: float | None = None
) -> None:
    """Capture with all node metadata (names, provenance, saved summaries) vs make_dot(show_saved),
    and the lazy capture a pass in `continue` makes when no listener wants its graph (the walk).

    Each repeat captures a fresh forward recorded with provenance, so the lazy labelling of
    nodes a call made without returning them is paid each time, as in a real pass.
    """
    model = transformer(layers)
    data = torch.randn(*batch, D_MODEL)
    provenance = Provenance()
    try:
        from torchviz import make_dot
    except ImportError:
        make_dot = None
    params = dict(model.named_parameters())
    ours, base, lazy, nodes = [], [], [], 0
    for i in range(repeat + 1):
        with provenance:
            out = model(data).pow(2).mean()
        start = time.thread_time()
        walked = capture([out.grad_fn], Names.from_scopes({"model": model, "out": out, "data": data}), lazy=True)
        lazy_elapsed = time.thread_time() - start
        del walked
        with provenance:
            out = model(data).pow(2).mean()
        start = time.thread_time()
        cap = capture([out.grad_fn], Names.from_scopes({"model": model, "out": out, "data": data}))
        elapsed = time.thread_time() - start
        nodes = cap.graph.number_of_nodes()
        assert any(d.source for _, d in cap.graph.nodes(data="info")), "capture saw no provenance"
        del cap
        if make_dot is not None:
            start = time.thread_time()
            make_dot(out, params=params, show_saved=True)
            base_elapsed = time.thread_time() - start
        if i:  # the first repeat warms up
            ours.append(elapsed)
            lazy.append(lazy_elapsed)
            if make_dot is not None:
                base.append(base_elapsed)
        del out
    sizes = f"{model_sizes(layers, batch)}, {nodes:,} nodes"
    if make_dot is None:
        add(
            Row(
                "capture with all node metadata",
                sizes,
                ms(median(ours)),
                "torchviz not installed",
                None,
                f"<= {target:.2f}x",
                None,
            )
        )
        add(
            Row(
                "  capture in continue (lazy: the walk; metadata at a pause)",
                sizes,
                ms(median(lazy)),
                "torchviz not installed",
                None,
                "-" if lazy_target is None else f"<= {lazy_target:.2f}x",
                None,
            )
        )
        return
    ratio_row("capture with all node metadata", sizes, median(ours), median(base), target, "make_dot(show_saved=True)")
    ratio_row(
        "  capture in continue (lazy: the walk; metadata at a pause)",
        sizes,
        median(lazy),
        median(base),
        lazy_target,
        "make_dot(show_saved=True)",
    )


# ---- backward in continue ----------------------------------------------------------------


def _continuing_session(full: bool, watch: bool = True, reader: bool = False) -> Session:
    """A session in `continue` (with a `nan` watch) whose one listener reads no graph (no client
    attached, no report): its passes' captures are lazy (gradtui.engine.capture.graph). It takes the
    planned passes' node batches unread and reads no flow, unless `reader`: then it gets every
    NodeRan and the flow, as a client reading everything does."""
    done = []
    session = Session(None, provenance=False, full_stats=full)
    session.add_listener(
        lambda e: done.append(1) if isinstance(e, ev.PassFinished) else None,
        graph=False,
        batches=not reader,
        flow=reader,
    )
    if watch:
        session.submit(parse("break nan"))
    session.run_on()  # no first pause: measure the hooks, not a human
    session.done = done  # type: ignore[attr-defined]
    return session


def bench_backward(
    layers: int,
    batch: tuple[int, int],
    repeat: int,
    width: int = D_MODEL,
    targets: tuple[float | None, float | None, float | None] = (1.10, 1.08, 1.10),
    label: str = "",
) -> None:
    """Backward through a session in `continue` vs plain backward: with a `nan` watch and the UI's
    statistics (norms, non-finite counts), without a watch, and with every statistic (a report);
    `targets` in that order.

    Includes everything gradtui does per pass: the walk and the hook plan, the hooks, the
    statistics (derived where the plan skips a node), the nan watch, events to a listener, the
    leaves' gradients and the flow. Plain and gradtui passes alternate; each forward is built
    outside the timed region.
    """
    model = transformer(layers, width)
    data = torch.randn(*batch, width)
    sessions = {
        "norms": _continuing_session(False),
        "nowatch": _continuing_session(False, watch=False),
        "full": _continuing_session(True, reader=True),  # a report or recording reads every node
        "reader": _continuing_session(False, reader=True),
        "python": _continuing_session(False),
    }  # the `norms` row with the Python posthooks only
    times: dict[str, list[float]] = {"plain": [], "norms": [], "nowatch": [], "full": [], "reader": [], "python": []}
    available = CompiledHooks.available

    def one(kind: str) -> float:
        loss = model(data).pow(2).mean()
        session = sessions.get(kind)
        if session is not None:
            session.install()
        if kind == "python":
            CompiledHooks.available = staticmethod(lambda: None)  # type: ignore[method-assign]
        try:
            start = time.thread_time()
            loss.backward()
            return time.thread_time() - start
        finally:
            CompiledHooks.available = available  # type: ignore[method-assign]
            if session is not None:
                session.uninstall()
            model.zero_grad(set_to_none=True)

    for i in range(repeat + 1):
        for kind in times:
            elapsed = one(kind)
            if i:
                times[kind].append(elapsed)
    for session in sessions.values():
        assert session.done, "the session saw no pass"  # type: ignore[attr-defined]
    sizes = model_sizes(layers, batch, width)
    base = median(times["plain"])
    for kind, text, target in (
        ("norms", "+ `nan` watch, the UI's statistics (norms, non-finite)", targets[0]),
        ("nowatch", "no watch, the UI's statistics", targets[1]),
        ("full", "+ `nan` watch, every statistic (--report)", targets[2]),
        ("reader", "+ `nan` watch, a listener reading every node and the flow", None),
        ("python", "+ `nan` watch, the UI's statistics, the Python posthooks only", None),
    ):
        paired_row(f"backward in continue {text}{label}", sizes, times[kind], times["plain"], target, "plain backward")
    nodes = _nodes_of(model, data)
    per_node = (median(times["norms"]) - base) / nodes * 1e6
    add(
        Row(
            f"  the same (+ nan, norms), gradtui's cost per node{label}",
            f"{sizes}, {nodes} nodes",
            f"{per_node:.1f} us",
            "above plain backward",
            None,
            "-",
            None,
        )
    )


def _nodes_of(model: nn.Module, data: torch.Tensor) -> int:
    """Nodes of the model's backward graph."""
    loss = model(data).pow(2).mean()
    return capture([loss.grad_fn]).graph.number_of_nodes()


# ---- forward with provenance, and anomaly mode -------------------------------------------


def bench_forward(
    layers: int, batch: tuple[int, int], repeat: int, width: int = D_MODEL, target: float | None = None
) -> None:
    """Forward with provenance recording vs plain forward, and anomaly mode's forward vs plain
    (what gradtui's provenance replaces), interleaved to share the noise; wall time (anomaly mode
    and the provenance's own rows: bench_provenance.py, thread time)."""
    model = transformer(layers, width)
    data = torch.randn(*batch, width)
    provenance = Provenance()
    plain, recorded, anomaly = [], [], []

    def timed(context: Callable[[], contextlib.AbstractContextManager]) -> float:
        """Seconds of one forward under a fresh `context()` (set_detect_anomaly switches the mode
        on as it is made); the output is dropped outside the timing."""
        with context():
            start = time.perf_counter()
            out = model(data)
            elapsed = time.perf_counter() - start
        del out
        return elapsed

    for i in range(repeat + 1):  # the first round warms up
        for times, context in (
            (plain, contextlib.nullcontext),
            (recorded, lambda: provenance),
            (anomaly, lambda: torch.autograd.set_detect_anomaly(True)),
        ):
            elapsed = timed(context)
            if i:
                times.append(elapsed)
    sizes = model_sizes(layers, batch, width)
    base = median(plain)
    ratio_row("forward with provenance recording (wall time)", sizes, median(recorded), base, target, "plain forward")
    ratio_row("forward under set_detect_anomaly(True) ", sizes, median(anomaly), base, None, "plain forward")
    add(
        Row(
            "gradtui's provenance vs anomaly mode, forward",
            sizes,
            ms(median(recorded)),
            f"{ms(median(anomaly))} anomaly mode",
            median(recorded) / median(anomaly),
            "-",
            None,
        )
    )


# ---- main --------------------------------------------------------------------------------

GROUPS = (
    "capture",
    "backward",
    "forward",
    "small",
    "agent",
    "hostreads",
    "floor",
    "chain100k",
    "wire",
    "ui",
    "memory",
    "bigtensor",
    "headless",
    "record",
)


def _forward_group(quick: bool, models: list[tuple[int, tuple[int, int]]], repeat: int) -> None:
    """The forward rows: provenance (d=64, d=256, user-written blocks), then anomaly mode's forward
    beside plain and provenance, which it replaces."""
    from bench_provenance import bench_forward as provenance_forward
    from bench_provenance import user_written

    pairs = 5 if quick else 40
    provenance_forward(4 if quick else 12, 64, (8, 32), pairs, target=1.15)
    provenance_forward(4 if quick else 12, D_MODEL, (4, 32) if quick else (8, 128), pairs // 2, target=1.05)
    blocks = 4 if quick else 24
    provenance_forward(
        blocks,
        64,
        (8, 32),
        pairs,
        None,
        user_written(blocks, 64),
        f"{blocks} user blocks of nn.Linear + nn.LayerNorm + nn.GELU, d=64, batch 8x32",
    )
    for layers, batch in models:
        bench_forward(layers, batch, 2 * repeat, target=None)


def _record_group(quick: bool) -> None:
    """The recording rows: --record and --flight, the SQLite writer, a replay's open, and
    fingerprints and --against beside a recorded pass."""
    bench_record(50, 2 if quick else 4, 1 if quick else 3)
    from bench_record import bench_recorder, bench_replay_open

    bench_recorder(10 if quick else 20, 2 if quick else 4, 1 if quick else 3)
    bench_replay_open(64 if quick else 1024, 1 if quick else 3)
    from bench_diff import bench_diff

    bench_diff(2 if quick else 4, 3 if quick else 7)


def _options() -> tuple[set[str], bool]:
    """The command line's groups to run (`--only`, checked) and `--quick`."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small models and few repeats (a smoke run)")
    parser.add_argument("--only", default=",".join(GROUPS), help=f"comma-separated groups of {GROUPS}")
    options = parser.parse_args()
    only = set(options.only.split(","))
    unknown = only - set(GROUPS)
    if unknown:
        parser.error(f"unknown group(s) {sorted(unknown)}; choose from {GROUPS}")
    return only, options.quick


def _compiled_posthooks() -> str:
    """Build gradtui's compiled posthooks first if they are not (what a user's second run has: the
    rows measure them), and say which posthooks the rows measure."""
    from gradtui.engine.hooks import native

    loaded = native.load()
    if loaded.module is None and loaded.reason != "GRADTUI_NATIVE=off":
        print("  (building gradtui's compiled posthooks once, ~15 s)", file=sys.stderr, flush=True)
        loaded = native.build()
    return "compiled posthooks" if loaded.module is not None else f"Python posthooks ({loaded.reason})"


def main() -> None:
    """Run every figure, then print the table."""
    only, quick = _options()
    torch.set_num_threads(1)  # the machines are small and noisy; one thread is steadier
    repeat = 3 if quick else 5
    # (layers, batch): the targets' 12- and 48-layer encoders; --quick shrinks them
    models = [(2, (4, 32)), (6, (4, 32))] if quick else [(12, (8, 128)), (48, (8, 64))]
    began = time.perf_counter()
    compiled = _compiled_posthooks()
    try:
        if "capture" in only:  # the 0.1x target is the 48-layer lazy row's; the eager rows keep the earlier 0.5x
            for layers, batch in models:
                last = layers == models[-1][0]
                bench_capture(layers, batch, repeat, target=0.5, lazy_target=0.1 if last else None)
        if "backward" in only:
            for layers, batch in models:
                first = layers == models[0][0]  # the d=256 targets are the 12-layer row's
                bench_backward(layers, batch, repeat, targets=(1.10, 1.08, 1.10) if first else (1.25, None, None))
        if "forward" in only:  # the provenance targets: the d=64 and d=256 rows (bench_provenance.py)
            _forward_group(quick, models, repeat)
        if "small" in only:  # tiny tensors: Python's cost per node shows (the per-node targets)
            small = " [tiny tensors]"
            # a pass is ~10 ms: many more pairs than the big rows, so a median is steady on a loaded machine
            bench_backward(4 if quick else 12, (8, 32), 5 * repeat, width=64, targets=(1.35, 1.30, 1.50), label=small)
            # a whole process is ~3.5 s, ~1.5 of them torch's import; one pair's ratio swings by +-10%
            # here (2026-12-04): fifteen pairs for a 3% target
            bench_headless_continue(20 if quick else 50, 2 if quick else 4, 1 if quick else 15)
        if "agent" in only:  # the UI's agent beside the engine's rows: what a user's process pays
            bench_agent_rows(quick)
        if "hostreads" in only:
            bench_host_reads(4 if quick else 12)
        if "floor" in only:  # the floors under the backward rows' targets, at both widths
            bench_floor(4 if quick else 12, 64, (8, 32), repeat)
            if not quick:
                bench_floor(12, D_MODEL, models[0][1], 3)
        if "chain100k" in only:
            bench_chain(20_000 if quick else 100_000, 1 if quick else 2)
        if "wire" in only:
            bench_wire(quick)
        if "ui" in only:
            bench_ui(10_002, 10 if quick else 40)
        if "memory" in only:
            bench_memory(20 if quick else 200)
            bench_peaks(quick)  # peak RSS of the two large runs, fresh processes, beside plain
        if "bigtensor" in only:
            bench_big_tensor(10_000_000 if quick else 100_000_000, 3 if quick else 5)
        if "headless" in only:
            bench_headless(*((120, 100, 1) if quick else (500, 400, 2)))
            bench_headless_backward(quick, 1 if quick else 3)
        if "record" in only:
            _record_group(quick)
    except Exception as exc:  # a group that fails still leaves the table of the rows measured before it
        add(Row(f"the run stopped: {type(exc).__name__}: {exc}", "-", "-", "-", None, "-", False))
        raise
    finally:
        cpu = f"{os.cpu_count()} cores" + (f", {platform.processor()}" if platform.processor() else "")
        print_table(
            f"gradtui bench{' --quick' if quick else ''}: torch {torch.__version__}, "
            f"{torch.get_num_threads()} torch thread, CPU ({cpu}), Python {platform.python_version()}; "
            f"medians of {repeat} runs ({2 * repeat} for the forward rows); {compiled}; "
            f"took {time.perf_counter() - began:.0f} s"
        )


if __name__ == "__main__":
    main()
