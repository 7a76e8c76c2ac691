"""The measuring half of benchmarks/gpu_check.sh (which installs and builds first): the CUDA rows
(benchmarks/bench_cuda.py) and the CUDA tests (tests/cuda), each in a child process with a time
limit, written to one markdown report.

    python benchmarks/gpu_check.py [--report gpu_report.md] [--seconds 420] [--dry-run] [--note TEXT]...

Without CUDA the rows are skipped (the report says so) and the tests run to show they skip
cleanly; the exit status is 0. With CUDA it is 1 when a step failed or a CUDA test failed.
`--dry-run`: the report of the machine only (torch, CUDA, the compiled posthooks), nothing run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _machine() -> tuple[bool, list[str]]:
    """Is CUDA available here, and the report's lines about the machine."""
    import torch

    cuda = torch.cuda.is_available()
    lines = [
        f"- torch {torch.__version__}, Python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} cores",
        f"- CUDA: {torch.version.cuda} on {torch.cuda.get_device_name()}"
        if cuda
        else "- CUDA: **absent** (torch.cuda.is_available() is False): the CUDA rows are skipped, the CUDA tests skip",
    ]
    from gradtui.engine.hooks import native

    built = native.library_path().exists()
    lines.append(f"- compiled posthooks: {'built at ' + str(native.library_path()) if built else 'not built'}")
    return cuda, lines


def _child(command: list[str], limit: float) -> tuple[int | None, str, float]:
    """Run `command` with a time limit: (exit status or None if it ran out of time, its output, seconds)."""
    began = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=max(limit, 1))
    except subprocess.TimeoutExpired as stopped:
        out = (stopped.stdout or b"").decode() if isinstance(stopped.stdout, bytes) else (stopped.stdout or "")
        return None, out, time.perf_counter() - began
    return done.returncode, done.stdout + done.stderr, time.perf_counter() - began


def _rows(seconds: float) -> tuple[bool, list[str]]:
    """The CUDA rows: (ok, report lines)."""
    with tempfile.TemporaryDirectory() as folder:
        result = Path(folder) / "rows.json"
        status, out, took = _child(
            [sys.executable, str(ROOT / "benchmarks" / "bench_cuda.py"), "--json", str(result)], seconds
        )
        if status == 0 and result.exists():
            sys.path.insert(0, str(ROOT / "benchmarks"))
            from bench_cuda import markdown

            return True, [markdown(json.loads(result.read_text())), f"(took {took:.0f} s)", ""]
    said = "ran out of time" if status is None else f"failed (exit {status})"
    return False, [
        "## CUDA rows",
        "",
        f"benchmarks/bench_cuda.py {said} after {took:.0f} s:",
        "",
        "```",
        out[-4000:],
        "```",
        "",
    ]


def _tests(seconds: float, cuda: bool) -> tuple[bool, list[str]]:
    """tests/cuda under pytest, serial: (ok, report lines)."""
    status, out, took = _child(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-rfEs", "tests/cuda"], seconds
    )
    tail = out.strip().splitlines()
    summary = next(
        (line for line in reversed(tail) if re.search(r"\b(passed|failed|skipped|error)", line)), "no summary"
    )
    ok = status == 0 or (status == 5 and not cuda)  # 5: nothing collected
    lines = [
        "## CUDA tests (tests/cuda)",
        "",
        f"`pytest -n 0 tests/cuda`: {summary} ({took:.0f} s" + (", ran out of time)" if status is None else ")"),
        "",
    ]
    details = [line for line in tail if line.startswith(("FAILED", "ERROR", "SKIPPED"))]
    if details or not ok:
        lines += ["```", *(details or tail[-60:]), "```", ""]
    return ok, lines


def main() -> int:
    """Measure, test, write the report; the exit status (see the module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, default=ROOT / "gpu_report.md")
    parser.add_argument("--seconds", type=float, default=420.0, help="the time left for the rows and the tests")
    parser.add_argument("--dry-run", action="store_true", help="report the machine only")
    parser.add_argument("--note", action="append", default=[], help="a line for the report (a step that failed)")
    args = parser.parse_args()
    began = time.perf_counter()
    cuda, machine = _machine()
    lines = [
        f"# gradtui GPU check, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        *machine,
        *(f"- note: {note}" for note in args.note),
        "",
    ]
    ok = True
    if args.dry_run:
        lines += ["Dry run: nothing was installed, built, measured or tested.", ""]
    else:
        if cuda:
            done, rows = _rows(args.seconds * 0.4)
            ok &= done
            lines += rows
        else:
            lines += ["## CUDA rows", "", "Skipped: CUDA is absent on this machine.", ""]
        done, tests = _tests(args.seconds - (time.perf_counter() - began) - 5, cuda)
        ok &= done
        lines += tests
    args.report.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0 if ok or not cuda else 1


if __name__ == "__main__":
    sys.exit(main())
