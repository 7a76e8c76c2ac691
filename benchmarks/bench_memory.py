"""Peak memory of a user's process, plain against gradtui, in fresh processes (`VmHWM`):

- a chain of 500,000 multiplications, stopped at its first node (as `gradtui script.py` does)
  then `continue` with a `nan` watch;
- 100,000 leaves summed, `gradtui --headless -c 'break nan' -c continue --record run.db`.

Memory is not timing: the figures hold under load. `python benchmarks/bench_memory.py` prints
them; the bench's `memory` group adds them as rows with a target of 1.5x plain (`bench_peaks`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PEAK = """\
def peak_mb():  # this process's own high-water mark: ru_maxrss keeps the parent's across fork + exec
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
"""

LEAVES = """\
import atexit, json, sys
import torch
torch.set_num_threads(1)
n = int(sys.argv[1])
leaves = [torch.randn(4, requires_grad=True) for _ in range(n)]
loss = torch.stack([p.sum() for p in leaves]).sum()
loss.backward()
"""
"""The script `gradtui --headless` runs; the peak is read when the process exits (atexit, after
gradtui's own exit work: a recording's last write included)."""

LEAVES_PEAK = (
    PEAK
    + """\
atexit.register(lambda: print(json.dumps({"peak_mb": peak_mb()}), file=sys.stderr))
"""
)


def _peak(argv: list[str], env: dict[str, str]) -> float:
    """Run `argv` in a fresh process; the peak it printed (the last JSON line of its output)."""
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode:
        raise RuntimeError(f"{argv[:4]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("{") and '"peak_mb"' in line]
    return float(json.loads(lines[-1])["peak_mb"])


def chain_peaks(nodes: int = 500_000) -> dict[str, float]:
    """Peak RSS (MB) of the chain run, plain and under gradtui: the 100k chain rows' program
    (bench_core.CHAIN, which reports its peak beside its times), at `nodes`."""
    from bench_core import CHAIN

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return {mode: _peak([sys.executable, "-c", CHAIN, str(nodes), mode], env) for mode in ("plain", "gradtui")}


def leaves_peaks(leaves: int = 100_000) -> dict[str, float]:
    """Peak RSS (MB) of the summed-leaves run, plain and `--headless -c 'break nan' -c continue
    --record`."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "leaves.py")
        with open(script, "w") as f:
            f.write(LEAVES.replace("import atexit, json, sys\n", "import atexit, json, sys\n" + LEAVES_PEAK))
        gradtui = [sys.executable, "-m", "gradtui", "--headless", "-c", "break nan", "-c", "continue"]
        gradtui += ["--record", os.path.join(folder, "run.db"), script, str(leaves)]
        return {
            "plain": _peak([sys.executable, script, str(leaves)], env),
            "gradtui": _peak(gradtui, env),
        }


def bench_peaks(quick: bool) -> None:
    """The two runs as bench rows, peak RSS beside plain's, target <= 1.5x (quick: a fifth of
    the nodes, where the fixed part of the process weighs more)."""
    from benchtable import Row, add

    runs = (
        ("peak RSS: chain, first pause then continue + nan", "chain", chain_peaks, 100_000 if quick else 500_000),
        (
            "peak RSS: leaves summed, --headless break nan + continue --record",
            "leaves",
            leaves_peaks,
            20_000 if quick else 100_000,
        ),
    )
    for figure, what, measure, size in runs:
        peaks = measure(size)
        ratio = peaks["gradtui"] / peaks["plain"]
        sizes = f"{size:,} muls, 4 elements each" if what == "chain" else f"{size:,} leaves of 4 elements"
        add(
            Row(
                figure,
                sizes,
                f"{peaks['gradtui']:.0f} MB",
                f"{peaks['plain']:.0f} MB plain",
                ratio,
                "<= 1.50x",
                ratio <= 1.5,
            )
        )


if __name__ == "__main__":
    which = sys.argv[1:] or ["chain", "leaves"]
    if "chain" in which:
        print("chain", json.dumps(chain_peaks()))
    if "leaves" in which:
        print("leaves", json.dumps(leaves_peaks()))
