"""gradtui's performance figures, as ratios against baselines measured in the same run.

    python scripts/bench.py            # all figures (torchviz: pip install '.[bench]')
    python scripts/bench.py --quick    # smaller models, for a smoke run

Targets (DESIGN.md): capture <= 0.5x torchviz make_dot(show_saved=True); backward in
`continue` <= 1.25x plain; forward with provenance <= 1.10x plain; memory after 200 passes
grows < 50 MB with no graph kept alive; the `s` key to the next node drawn <= 50 ms median
with a 10,000-node pass loaded. Timing thresholds are never asserted in tests.
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gradtui.core import events as ev  # noqa: E402
from gradtui.core.graph import Names, capture  # noqa: E402
from gradtui.core.provenance import Provenance  # noqa: E402
from gradtui.core.session import Session  # noqa: E402


def median_time(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of `fn` over `repeat` runs, after one warm-up run."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def transformer(layers: int, width: int = 64) -> nn.Module:
    """A TransformerEncoder of `layers` layers, seeded."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(width, 4, 2 * width, batch_first=True, dropout=0.0)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


def row(figure: str, ours: float, base: float, target: float, unit: str = "ms") -> None:
    """Print one figure: our time, the baseline's, the ratio and the target."""
    ratio = ours / base
    verdict = "ok" if ratio <= target else "MISSED"
    print(f"{figure:<52} {ours * 1e3:9.2f} {unit} vs {base * 1e3:9.2f} {unit}  ratio {ratio:5.2f}"
          f"  (target <= {target:.2f}: {verdict})")


def bench_capture(layers: int, repeat: int) -> None:
    """Capture with all node metadata vs torchviz make_dot(show_saved=True)."""
    model = transformer(layers)
    out = model(torch.randn(4, 16, 64)).sum()
    nodes = capture([out.grad_fn]).graph.number_of_nodes()
    ours = median_time(lambda: capture([out.grad_fn], Names.from_scopes({"model": model, "out": out})), repeat)
    try:
        from torchviz import make_dot
    except ImportError:
        print(f"capture of {layers}-layer TransformerEncoder ({nodes} nodes): {ours * 1e3:.2f} ms;"
              " torchviz not installed (pip install '.[bench]') so no ratio")
        return
    params = dict(model.named_parameters())
    base = median_time(lambda: make_dot(out, params=params, show_saved=True), repeat)
    row(f"capture, {layers}-layer encoder, {nodes} nodes", ours, base, 0.5)


def time_backward(model: nn.Module, data: torch.Tensor, repeat: int) -> float:
    """Median time of backward alone: each forward is built outside the timed region."""
    times = []
    for _ in range(repeat + 1):
        loss = model(data).pow(2).mean()
        start = time.perf_counter()
        loss.backward()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def bench_backward(layers: int, repeat: int, width: int, batch: tuple[int, int]) -> None:
    """Backward through a session in `continue` with a `nan` breakpoint vs plain backward.

    Includes everything gradtui does per pass: graph capture, hooks on every node, stats of
    every incoming and outgoing gradient, the nan watch, events to a listener.
    """
    model = transformer(layers, width)
    data = torch.randn(*batch, width)
    base = time_backward(model, data, repeat)
    for full, what in ((True, "full stats (report)"), (False, "norms (UI)")):
        done = []
        session = Session(lambda e: done.append(1) if isinstance(e, ev.PassFinished) else None,
                          provenance=False, full_stats=full)
        session.submit("break nan")
        session._mode = "continue"  # no first pause: measure the hooks, not a human
        with session:
            ours = time_backward(model, data, repeat)
        assert done, "the session saw no pass"
        row(f"backward, continue, {what}, {layers}x{width}, {batch[0]}x{batch[1]}", ours, base, 1.25)


def bench_forward(layers: int, repeat: int, width: int, batch: tuple[int, int]) -> None:
    """Forward with provenance recording vs plain forward, interleaved to share the noise."""
    model = transformer(layers, width)
    data = torch.randn(*batch, width)
    provenance = Provenance()
    plain, recorded = [], []
    model(data)
    for _ in range(repeat):
        start = time.perf_counter()
        model(data)
        plain.append(time.perf_counter() - start)
        with provenance:
            start = time.perf_counter()
            model(data)
            recorded.append(time.perf_counter() - start)
    row(f"forward with provenance, {layers}x{width} encoder, {batch[0]}x{batch[1]}",
        statistics.median(recorded), statistics.median(plain), 1.10)


def bench_memory(passes: int) -> None:
    """RSS growth over `passes` debugged passes in a loop, and whether any graph survives."""
    model = nn.Sequential(nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 1))
    data = torch.randn(64, 256)
    alive: list[weakref.ref] = []
    session = Session(lambda e: None)
    session._mode = "continue"

    def loop() -> None:
        with session:
            for _ in range(passes):
                hidden = model[1](model[0](data))
                alive.append(weakref.ref(hidden))
                model[2](hidden).sum().backward()
                model.zero_grad()
                del hidden

    loop()  # warm up allocator and caches
    alive.clear()
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    thread = threading.Thread(target=loop, name="bench-memory")
    thread.start()
    thread.join(600)
    gc.collect()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    survivors = sum(ref() is not None for ref in alive)
    grown = (after - before) / 1024
    verdict = "ok" if grown < 50 and survivors == 0 else "MISSED"
    print(f"{'memory after ' + str(passes) + ' passes':<52} peak RSS grew {grown:6.1f} MB,"
          f" graphs alive {survivors}  (target < 50 MB, 0 alive: {verdict})")


LONG_CHAIN = """\
import torch
x = torch.tensor([1.0], requires_grad=True)
y = x
for _ in range({n}):
    y = y * 1.0001
y.sum().backward()
"""


def bench_ui_step(nodes: int, steps: int) -> None:
    """Median time from the `s` key to the next paused node drawn, in the Textual app."""
    import asyncio
    import tempfile

    from gradtui.ui.app import GradtuiApp

    class TimedApp(GradtuiApp):
        """Records, per step, the time from the step action to the screen drawn after the pause."""

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.times: list[float] = []
            self._start: float | None = None

        def action_step(self) -> None:
            self._start = time.perf_counter()
            super().action_step()

        def on_bridge_engine_event(self, message) -> None:
            super().on_bridge_engine_event(message)
            if isinstance(message.event, ev.Paused) and self._start is not None:
                start, self._start = self._start, None
                self.call_after_refresh(lambda: self.times.append(time.perf_counter() - start))

    async def drive(app: TimedApp) -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            deadline = time.monotonic() + 120
            while app.state.current != 0:
                assert time.monotonic() < deadline, "the first pause never came"
                await pilot.pause(0.05)
            for _ in range(steps):
                count = len(app.times)
                await pilot.press("s")
                deadline = time.monotonic() + 10
                while len(app.times) == count:
                    assert time.monotonic() < deadline, "a step never drew"
                    await pilot.pause(0.001)
            await app.action_quit()

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(LONG_CHAIN.format(n=nodes - 2))
    app = TimedApp(script.name)
    asyncio.run(drive(app))
    median = statistics.median(app.times)
    verdict = "ok" if median <= 0.050 else "MISSED"
    print(f"{'step key to next node drawn, ' + f'{nodes:,} nodes':<52} median {median * 1e3:6.1f} ms,"
          f" max {max(app.times) * 1e3:6.1f} ms over {steps} steps  (target <= 50 ms: {verdict})")


def main() -> None:
    """Run every figure."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small models and few repeats")
    options = parser.parse_args()
    torch.set_num_threads(1)  # the machines are small and noisy; one thread is steadier
    layers, repeat = (4, 3) if options.quick else (48, 7)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); medians of {repeat} runs")
    bench_capture(layers, repeat)
    bench_backward(min(layers, 12), repeat, 64, (8, 32))  # tiny tensors: Python overhead shows
    bench_backward(min(layers, 12), repeat, 256, (16, 128))  # a realistic size
    bench_forward(min(layers, 12), repeat, 64, (8, 32))  # tiny: a TorchFunctionMode's own cost shows
    bench_forward(min(layers, 12), repeat, 256, (16, 128))
    bench_memory(20 if options.quick else 200)
    bench_ui_step(10_002, 10 if options.quick else 40)


if __name__ == "__main__":
    main()
