"""Forward with provenance against plain forward, with the floors beside it.

    python benchmarks/bench_provenance.py            # the targets' sizes (~1 min on 2 loaded cores)
    python benchmarks/bench_provenance.py --quick    # a smoke run (a few seconds)

Each figure is a median of paired runs alternated in one process (plain, provenance, floors, in
turn, so all see the same load), timed by the thread's CPU time with torch on one thread: the
machine is shared, and wall time would count other processes' turns on the core. The rows are
printed in bench.py's table (benchmarks/benchtable.py), so bench.py can run them as a group.

The floors: a no-op TorchFunctionMode with no-op global module hooks (what recording every op
from Python costs before it records anything: gradtui's first provenance sat above it); the no-op
global module hooks alone (what remains once the mode is off the stack while torch's own module
code runs, if module calls are seen by hooks: any global hook sends every call down torch's
hooked path); and a no-op wrapper of `nn.Module.__call__` (how gradtui sees module calls now:
the floor of the design here). A last row checks what the figure buys: the share of the graph's
nodes that get both a module path and a source line.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import nn
from torch.nn.modules import module as nn_module
from torch.overrides import TorchFunctionMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchtable import Row, add, median, print_table, ratio_row  # noqa: E402

from gradtui.engine.capture.graph import capture  # noqa: E402
from gradtui.engine.compat import is_compiling  # noqa: E402
from gradtui.engine.provenance.forward import Provenance  # noqa: E402


def encoder(layers: int, width: int) -> nn.Module:
    """bench.py's encoder: nn.TransformerEncoder, seeded, no dropout (heads/ffn as bench.py)."""
    torch.manual_seed(0)
    heads, ffn = (8, 1024) if width == 256 else (4, 2 * width)
    layer = nn.TransformerEncoderLayer(width, heads, ffn, batch_first=True, dropout=0.0)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


def sizes_of(layers: int, width: int, batch: tuple[int, int]) -> str:
    heads, ffn = (8, 1024) if width == 256 else (4, 2 * width)
    return f"{layers}-layer encoder d={width} h={heads} ffn={ffn}, batch {batch[0]}x{batch[1]}"


class _CallThrough(TorchFunctionMode):
    """A mode that only calls through."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **kwargs) if kwargs else func(*args)


@contextlib.contextmanager
def _noop_hooks() -> Iterator[None]:
    """No-op global module pre- and post-hooks (torch's module call takes its hooked path)."""
    handles = [
        nn_module.register_module_forward_pre_hook(lambda module, args: None),
        nn_module.register_module_forward_hook(lambda module, args, out: None, always_call=True),
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def _noop_call_wrapper() -> Iterator[None]:
    """A no-op wrapper of `nn.Module.__call__`, checking what gradtui's checks first."""
    call, threads = nn.Module.__dict__["__call__"], {threading.get_ident(): None}

    def wrapper(self, *args, **kwargs):
        if is_compiling() or threading.get_ident() not in threads:
            return call(self, *args, **kwargs)
        try:
            output = call(self, *args, **kwargs)
        except BaseException:
            raise
        return output

    nn.Module.__call__ = wrapper
    try:
        yield
    finally:
        nn.Module.__call__ = call


@contextlib.contextmanager
def _noop_mode_and_hooks() -> Iterator[None]:
    with _noop_hooks(), _CallThrough():
        yield


class _Block(nn.Module):
    """A block written in user code over small torch modules: each is a stretch of its own."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc, self.norm, self.act = nn.Linear(width, width), nn.LayerNorm(width), nn.GELU()

    def forward(self, x):
        return x + self.act(self.norm(self.fc(x)))


def user_written(blocks: int, width: int) -> nn.Module:
    """A model whose own forward is user code (as a model from site-packages is)."""
    torch.manual_seed(0)
    return nn.Sequential(*[_Block(width) for _ in range(blocks)])


def bench_forward(
    layers: int,
    width: int,
    batch: tuple[int, int],
    pairs: int,
    target: float | None,
    model: nn.Module | None = None,
    sizes: str | None = None,
) -> None:
    """The provenance row at one width, its two floors, and the labelled share of the graph."""
    model = encoder(layers, width) if model is None else model
    data = torch.randn(*batch, width)
    provenance = Provenance()
    runs: dict[str, Callable[[], contextlib.AbstractContextManager]] = {
        "plain": contextlib.nullcontext,
        "provenance": lambda: provenance,
        "mode+hooks": _noop_mode_and_hooks,
        "hooks": _noop_hooks,
        "wrapper": _noop_call_wrapper,
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    for i in range(pairs + 2):  # two warm-up rounds
        for name, context in runs.items():
            with context():
                start = time.thread_time()
                out = model(data)
                elapsed = time.thread_time() - start
            del out
            if i >= 2:
                times[name].append(elapsed)
    sizes = sizes or sizes_of(layers, width, batch)
    base = median(times["plain"])
    ratio_row(
        f"forward with provenance, d={width}" + (" (user-written blocks)" if target is None else ""),
        sizes,
        median(times["provenance"]),
        base,
        target,
        "plain forward",
    )
    ratio_row(
        "  floor: a no-op TorchFunctionMode + global module hooks",
        sizes,
        median(times["mode+hooks"]),
        base,
        None,
        "plain forward",
    )
    ratio_row("  floor: global module hooks alone", sizes, median(times["hooks"]), base, None, "plain forward")
    ratio_row(
        "  floor: a no-op wrapper of nn.Module.__call__", sizes, median(times["wrapper"]), base, None, "plain forward"
    )
    with provenance:
        out = model(data)
    infos = capture([out.grad_fn]).infos
    ops = [a for a in infos if a.kind != "accumulate"]
    labelled = sum(1 for a in ops if a.module is not None and a.source is not None)
    add(
        Row(
            f"  nodes with a module path and a line, d={width}",
            sizes,
            f"{labelled}/{len(ops)}",
            "every node",
            None,
            "all",
            labelled == len(ops),
        )
    )


def main() -> None:
    """Run the rows, then print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small models and few pairs (a smoke run)")
    quick = parser.parse_args().quick
    torch.set_num_threads(1)
    bench_forward(2 if quick else 12, 64, (8, 32), 5 if quick else 40, target=1.15)
    bench_forward(2 if quick else 12, 256, (8, 32) if quick else (8, 128), 3 if quick else 20, target=1.05)
    blocks = 4 if quick else 24
    bench_forward(
        blocks,
        64,
        (8, 32),
        5 if quick else 40,
        None,
        user_written(blocks, 64),
        f"{blocks} user blocks of nn.Linear + nn.LayerNorm + nn.GELU, d=64, batch 8x32",
    )
    print_table(
        f"gradtui provenance bench{' --quick' if quick else ''}: torch {torch.__version__}, 1 torch thread, "
        "CPU thread time, medians of paired alternated runs"
    )


if __name__ == "__main__":
    main()
