"""The bench's figures for the core's hot path: host reads per node, the no-op hook
floor, and a 100,000-node chain pass.

    python benchmarks/bench.py --only hostreads,floor,chain100k

`hostreads` counts, with tests/helpers.py's HostReads, the calls that read a tensor back
to the host (each a device sync on a GPU) during one pass of the d=64 encoder, per mode;
`floor` times a no-op prehook + posthook on every node against plain backward (the floor of
any hook-based design, printed beside the targets it bounds), and one norm of every gradient a
pass made (the floor of any per-node statistics); `chain100k` runs a chain of
100,000 multiplications in a fresh process, plain and under a session in `continue` with a
`nan` watch (first pause, the pass, peak memory).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from benchtable import Row, add, alternate, median, paired_row, ratio_row

ROOT = Path(__file__).resolve().parents[1]


def _encoder(layers: int, width: int):
    from bench_models import transformer

    return transformer(layers, width)


def bench_host_reads(layers: int = 12, width: int = 64, batch: tuple[int, int] = (8, 32)) -> None:
    """Host reads per node of one pass, per mode (a count, the same on any machine), as an
    accelerator's pass makes them: its reads are torch's Python calls (the compiled library reads
    CPU tensors only, in C++, where they sync nothing), so the library is off for these rows."""
    from gradtui.engine.hooks import native

    load = native.load
    native.load = lambda: native.Native(None, "off: an accelerator's pass reads through torch's Python calls")
    try:
        _host_reads(layers, width, batch)
    finally:
        native.load = load


def _host_reads(layers: int, width: int, batch: tuple[int, int]) -> None:
    from gradtui.engine.session import CHECK_EVERY, Session
    from gradtui.protocol import events as ev
    from gradtui.protocol.commands import parse
    from tests.helpers import HostReads

    model = _encoder(layers, width)
    data = torch.randn(*batch, width)
    modes = [  # (name, full stats, breakpoint, stepping, target per node)
        ("continue, no watch (UI: norms)", False, None, False, 0.05),
        ("continue + `nan` watch", False, "nan", False, 0.2),
        ("continue + `norm>1e9` watch", False, "norm>1e9", False, 0.2),
        ("continue + `nan`, every statistic (--report)", True, "nan", False, 0.2),
        ("step through every node (each pause: histograms)", True, None, True, None),
    ]
    for name, full, spec, stepping, target in modes:
        # the accelerator's read rate (CHECK_EVERY); a CPU pass reads at every node with a watch
        session = Session(None, provenance=False, full_stats=full, check_every=CHECK_EVERY)
        nodes: list[int] = []
        session.add_listener(
            lambda e: nodes.append(e.graph.number_of_nodes()) if isinstance(e, ev.PassStarted) else None
        )
        if stepping:
            session.add_listener(lambda e, s=session: s.submit(parse("step")) if isinstance(e, ev.Paused) else None)
        else:
            session.run_on()
        if spec:
            session.submit(parse(f"break {spec}"))
        loss = model(data).pow(2).mean()
        with session, HostReads() as reads:
            loss.backward()
        model.zero_grad(set_to_none=True)
        per_node = reads.total / nodes[0]
        counts = ", ".join(f"{k} {v}" for k, v in sorted(reads.counts.items()))
        add(
            Row(
                f"host reads per node: {name}",
                f"{layers}-layer encoder d={width}, {nodes[0]} nodes",
                f"{per_node:.3f} / node",
                f"{reads.total} in the pass ({counts})",
                None,
                "-" if target is None else f"<= {target:g}",
                None if target is None else per_node <= target,
            )
        )


def bench_floor(layers: int, width: int, batch: tuple[int, int], repeat: int) -> None:
    """A no-op prehook and posthook on every node (registered and removed each pass, as gradtui
    does) against plain backward: what no hook-based design can go below."""
    from bench_models import model_sizes

    model = _encoder(layers, width)
    data = torch.randn(*batch, width)
    plain, hooked = [], []

    for i in range(repeat + 1):
        for times, hook in ((plain, False), (hooked, True)):
            loss = model(data).pow(2).mean()
            start = time.thread_time()
            handles = []
            if hook:
                for node in _walked(loss.grad_fn):
                    handles.append(node.register_prehook(lambda grads: None))
                    handles.append(node.register_hook(lambda grads_in, grads_out: None))
            loss.backward()
            for handle in handles:
                handle.remove()
            if i:
                times.append(time.thread_time() - start)
            model.zero_grad(set_to_none=True)
    paired_row(
        "floor: a no-op prehook + posthook on every node",
        model_sizes(layers, batch, width),
        hooked,
        plain,
        None,
        "plain backward",
    )
    _floor_planned(model, data, layers, batch, width, repeat)
    # The other floor: what taking each gradient's norm costs, whoever takes it and however it is
    # batched. One fused norm over every distinct gradient a pass made (kept by a posthook in an
    # untimed pass), against the plain backward: per-node statistics cannot cost less.
    grads: dict[int, torch.Tensor] = {}

    def keep(grad_inputs, _grad_outputs):
        for grad in grad_inputs:
            if grad is not None and grad.numel() > 1:
                grads.setdefault(grad.data_ptr(), grad)

    loss = model(data).pow(2).mean()
    handles = [node.register_hook(keep) for node in _walked(loss.grad_fn)]
    loss.backward()
    for handle in handles:
        handle.remove()
    model.zero_grad(set_to_none=True)
    tensors = list(grads.values())
    norms = []
    for i in range(repeat + 1):
        start = time.thread_time()
        torch._foreach_norm(tensors)
        if i:
            norms.append(time.thread_time() - start)
    megabytes = sum(t.numel() * t.element_size() for t in tensors) / 2**20
    ratio_row(
        "floor: one norm of every gradient the pass made (one fused call)",
        f"{model_sizes(layers, batch, width)}, {len(tensors)} gradients, {megabytes:.0f} MB",
        median(norms),
        median(plain),
        None,
        "plain backward",
    )


def _floor_planned(model, data, layers: int, batch: tuple[int, int], width: int, repeat: int) -> None:
    """Two floors under the `continue` + `nan` rows, against plain backward: a no-op posthook on the
    nodes the hook plan hooks (gradtui.engine.hooks.plan) and nothing on the others (the walk outside the
    timed region); and the Python prototype, the same posthooks taking the norm of each gradient
    sent (and of what arrives from several producers) and checking it is finite, with a bare walk
    and the registration timed, the plan reused and no handle removed: the mechanism with none of
    gradtui's own work (statistics, events, the plan cache's checks); and, where a compiler is
    at hand, that prototype's posthooks compiled (bench_compiled.py: another mechanism's floor)."""
    from bench_compiled import compiled_hooks
    from bench_models import model_sizes

    from gradtui.engine.capture.graph import capture
    from gradtui.engine.hooks.plan import NONE, make_plan

    cap = capture([model(data).pow(2).mean().grad_fn], lazy=True)
    plan = make_plan(cap.walk, cap.nodes, cap.roots, False)
    hooked = [i for i, kind in enumerate(plan.hooks) if kind != NONE]
    several = [sender is None for sender in plan.producer]
    planned_nodes, total = len(hooked), len(cap.nodes)
    del cap
    compiled, why = compiled_hooks()
    kinds = ("plain", "noop", "norms", "compiled") if compiled else ("plain", "noop", "norms")
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for i in range(repeat + 1):
        for kind, spent in times.items():
            loss = model(data).pow(2).mean()
            handles = []
            if kind == "noop":
                nodes = _walked(loss.grad_fn)
                handles = [nodes[k].register_hook(lambda grads_in, grads_out: None) for k in hooked]
                del nodes
            start = time.thread_time()
            if kind == "norms":
                nodes = _walked(loss.grad_fn)
                for k in hooked:
                    nodes[k].register_hook(_norm_hook(k, several[k]))
                del nodes
            elif kind == "compiled":
                compiled.hook_nodes(_walked(loss.grad_fn), hooked)
            loss.backward()
            if kind == "compiled" and compiled.take()[1] >= 0:
                raise FloatingPointError("a non-finite gradient in the bench's model")
            for handle in handles:
                handle.remove()
            if i:
                spent.append(time.thread_time() - start)
            model.zero_grad(set_to_none=True)
    sizes = f"{model_sizes(layers, batch, width)}, {planned_nodes} of {total} nodes"
    paired_row(
        "floor: a no-op posthook on the planned nodes only",
        sizes,
        times["noop"],
        times["plain"],
        None,
        "plain backward",
    )
    paired_row(
        "floor: the prototype (planned posthooks, norm + finite check inside, bare walk)",
        sizes,
        times["norms"],
        times["plain"],
        None,
        "plain backward",
    )
    figure = "floor: the prototype's posthooks compiled (C++: no Python per node)"
    if compiled:
        paired_row(figure, sizes, times["compiled"], times["plain"], None, "plain backward")
    else:
        add(Row(figure, sizes, "not built", why, None, "-", None))


def _norm_hook(node: int, several: bool):
    """The prototype's posthook for `node`: the norm of each gradient it sends, checked finite, and
    of what arrived if it came from `several` producers (the engine summed it)."""
    norm = torch.linalg.vector_norm

    def hook(grads_in, grads_out):
        for grad in grads_in:
            if grad is not None and not math.isfinite(norm(grad).item()):
                raise FloatingPointError(f"node {node}")
        if several and grads_out[0] is not None and not math.isfinite(norm(grads_out[0]).item()):
            raise FloatingPointError(f"node {node}")

    return hook


def _walked(root) -> list:
    """Every autograd node reachable from `root`, breadth-first, in the order gradtui's walk numbers
    them (so a plan's node ids index it)."""
    nodes, seen = [root], {root}
    for node in nodes:  # the list grows as the walk finds nodes
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                nodes.append(child)
    return nodes


CHAIN = """\
import json, resource, sys, time
def peak_kb():  # this process's own high-water mark: ru_maxrss keeps the parent's across fork + exec
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
import torch
torch.set_num_threads(1)
from gradtui.engine.capture.graph import allow_deep_graphs
from gradtui.protocol.commands import parse
allow_deep_graphs()  # freeing a 100,000-node chain recurses once per node (gradtui.engine.capture.graph.allow_deep_graphs says why)
n, mode = int(sys.argv[1]), sys.argv[2]
x = torch.ones(4, requires_grad=True)
y = x
for _ in range(n):
    y = y * 1.0000001
loss = y.sum()
before = peak_kb()
out = {"before_mb": before / 1024}
if mode == "plain":
    start = time.thread_time()
    loss.backward()
    out["pass"] = time.thread_time() - start
else:
    from gradtui.protocol import events as ev
    from gradtui.engine.session import Session
    session = Session(None, provenance=False, full_stats=False)
    start = time.thread_time()
    def on(event):
        if isinstance(event, ev.Paused):
            out.setdefault("first_pause", time.thread_time() - start)
            session.submit(parse("continue"))
    session.add_listener(on, batches=True)  # it reads no node: it takes the batches unread
    session.submit(parse("break nan"))
    with session:
        start = time.thread_time()
        loss.backward()
        out["pass"] = time.thread_time() - start
out["peak_mb"] = peak_kb() / 1024
del x, y, loss
print(json.dumps(out))
"""


def bench_chain(nodes: int = 100_000, rounds: int = 2) -> None:
    """A chain of `nodes` multiplications: plain backward vs a session that stops at the first
    node (as `gradtui script.py` does) and then continues with a `nan` watch; in fresh processes,
    alternated; each process must exit cleanly (a deep graph must not segfault at exit)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    runs: dict[str, list[dict]] = {"plain": [], "gradtui": []}
    for _ in range(rounds):
        for mode in runs:
            done = subprocess.run(
                [sys.executable, "-c", CHAIN, str(nodes), mode], env=env, capture_output=True, text=True, timeout=600
            )
            if done.returncode:
                raise RuntimeError(f"chain {mode} failed ({done.returncode}):\n{done.stderr[-2000:]}")
            runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    sizes = f"a chain of {nodes:,} muls, 4 elements each"
    plain = median([r["pass"] for r in runs["plain"]])
    ours = median([r["pass"] - r["first_pause"] for r in runs["gradtui"]])
    first = median([r["first_pause"] for r in runs["gradtui"]])
    add(
        Row(
            "100k chain: first pause (capture, hooks, the pause)",
            sizes,
            f"{first:.2f} s",
            "from backward()",
            None,
            "<= 5 s",
            first <= 5,
        )
    )
    ratio_row("100k chain: the pass in continue after it, nan watch", sizes, ours, plain, 2.0, "plain backward")
    mem = median([r["peak_mb"] for r in runs["gradtui"]]) / median([r["peak_mb"] for r in runs["plain"]])
    add(
        Row(
            "100k chain: peak RSS of the process",
            sizes,
            f"{median([r['peak_mb'] for r in runs['gradtui']]):.0f} MB",
            f"{median([r['peak_mb'] for r in runs['plain']]):.0f} MB plain",
            mem,
            "<= 2.00x",
            mem <= 2.0,
        )
    )


def bench_headless_continue(steps: int, layers: int, rounds: int) -> None:
    """Whole process: `python loop.py` vs `gradtui --headless -c continue loop.py`, the d=64
    encoder loop of the record rows, `rounds` alternated pairs: the median of their ratios.

    gradtui's bytecode is compiled first, as an installed gradtui's is: python reads torch's from
    site-packages, but a checkout run with PYTHONDONTWRITEBYTECODE (this machine's default) would
    compile every gradtui module from source in every run (~45 ms of the start, not gradtui's)."""
    import compileall
    import tempfile

    from bench_models import ENCODER_LOOP

    compileall.compile_dir(str(ROOT / "gradtui"), quiet=1)  # into gradtui's __pycache__ (git-ignored)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}

    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "encoder_loop.py")
        with open(script, "w") as f:
            f.write(ENCODER_LOOP)
        runs = {
            "plain": [sys.executable, script],
            "gradtui": [sys.executable, "-m", "gradtui", "--headless", "-c", "continue", script],
        }
        times = alternate(runs, [str(steps), str(layers)], env, rounds)
    paired_row(
        "whole process, `--headless -c continue`",
        f"{steps} steps, {layers}-layer encoder d=64, batch 8x32",
        times["gradtui"],
        times["plain"],
        1.03,
        "python",
    )
