"""The fingerprints' own bookkeeping (PassPrints) on one pass replayed, and another version beside it.

    python benchmarks/bench_prints_replay.py [--width D] [--rounds R] [--other OLD_VALUES.py]

One recorded backward of bench_diff.py's encoder (d=256, `--width 64`: d=64) runs with
fingerprints and its graph retained; every call the pass made into PassPrints (the node, its
autograd node, what it received and sent) is kept. Then a fresh PassPrints of the same graph is
fed those calls and asked for its event, again and again: the CPU time of the bookkeeping alone
(every sketch a constant), with no backward, no store and no hooks around it, so two versions
can be told apart by a few percent. `--other FILE`: a copy of gradtui/engine/fingerprints/values.py
(`git show main:gradtui/engine/fingerprints/values.py > old.py`) loaded beside the package's: first
both replay the pass with real sketches and their events must be the same, then the two are
timed in alternating order and the median of the per-round ratios printed (new / other).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_diff import constant, load_values, one_pass  # noqa: E402
from bench_models import transformer  # noqa: E402

from gradtui.engine.fingerprints import sketch as sk  # noqa: E402
from gradtui.engine.fingerprints import values as package  # noqa: E402
from gradtui.engine.hooks import native  # noqa: E402


class Captured:
    """One pass's PassPrints calls: its nodes and slots, the `unhooked` the hook plan set, the
    `node` calls' arguments in order."""

    def __init__(self, width: int) -> None:
        self.nodes: list[Any] = []
        self.slots: list[Any] | None = None
        self.unhooked: Any = None
        self.calls: list[tuple[Any, ...]] = []
        init, node = package.PassPrints.__init__, package.PassPrints.node
        backward = torch.Tensor.backward
        made: list[Any] = []

        def keep_init(prints: Any, nodes: list[Any], against: Any = None, reference: str = "", slots: Any = None):  # noqa: ANN202
            self.nodes, self.slots, self.calls = nodes, slots, []
            made[:] = [prints]
            init(prints, nodes, against, reference, slots)

        def keep_node(prints: Any, *args: Any):  # noqa: ANN202
            self.calls.append(args)
            return node(prints, *args)

        package.PassPrints.__init__ = keep_init  # type: ignore[method-assign]
        package.PassPrints.node = keep_node  # type: ignore[method-assign]
        torch.Tensor.backward = lambda t, *a, **k: backward(t, retain_graph=True)  # type: ignore[method-assign]
        try:
            model = transformer(4, width)
            x = torch.randn(8, 32, width, generator=torch.Generator().manual_seed(1))
            with tempfile.TemporaryDirectory() as folder:
                for i in range(2):  # the second pass: the graph's plan made by the first
                    one_pass(model, x, True, os.path.join(folder, f"{i}.db"))
        finally:
            package.PassPrints.__init__, package.PassPrints.node = init, node  # type: ignore[method-assign]
            torch.Tensor.backward = backward  # type: ignore[method-assign]
        self.unhooked = made[0].unhooked

    def replay(self, module: ModuleType) -> tuple[Any, int]:
        """The pass's event as `module`'s PassPrints makes it from the calls, and its values sketched."""
        prints = module.PassPrints(self.nodes, slots=self.slots)
        prints.unhooked = self.unhooked
        for args in self.calls:
            prints.node(*args)
        return prints.event(0), prints.sketched


def main() -> None:
    """Capture the pass, check the two versions agree (`--other`), time them (see module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=80)
    parser.add_argument("--other")
    options = parser.parse_args()
    torch.set_num_threads(1)
    compiled = native.load().module
    if compiled is not None:
        sk.use_compiled(compiled.sketch)
    captured = Captured(options.width)
    versions = {"package": package} | ({"other": load_values(options.other)} if options.other else {})
    if "other" in versions:
        mine, theirs = captured.replay(package), captured.replay(versions["other"])
        same = mine[0].prints == theirs[0].prints and mine[1] == theirs[1]
        print(f"events the same: {same} ({len(mine[0].prints)} prints, {mine[1]} values sketched)")
        if not same:
            sys.exit(1)
    for module in versions.values():
        module.fingerprint = constant
    times: dict[str, list[float]] = {name: [] for name in versions}
    order = list(versions)
    for r in range(options.rounds):
        for name in order if r % 2 else order[::-1]:
            start = time.process_time()
            captured.replay(versions[name])
            times[name].append(time.process_time() - start)
    print(
        f"PassPrints on one pass replayed, d={options.width}, {len(captured.calls)} node calls, every sketch a "
        f"constant, {options.rounds} rounds, load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (CPU time):"
    )
    for name, taken in times.items():
        print(f"  {name:8} {statistics.median(taken) * 1e3:6.2f} ms")
    if "other" in times:
        paired = statistics.median(a / b for a, b in zip(times["package"], times["other"]))
        print(f"  package / other, paired: {paired:.3f}")


if __name__ == "__main__":
    main()
