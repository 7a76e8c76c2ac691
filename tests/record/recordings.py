"""Recordings the record tests share, made once per test session (a subprocess run each).

`flight_recording()` is the flight recorder's reference run: nan_at_30.py under `gradtui --headless
--flight 5 -c 'break nan' -c continue --record run.db`, so passes 26-30 have per-node data and
the run stopped in pass 30 after the SqrtBackward0 whose backward divides by zero. Every test
that reads it only reads it (replays open it read-only; copies are made for edits).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from tests.helpers import REPO, script

RUN_TIMEOUT = 90.0
"""Seconds one gradtui subprocess may take."""


def gradtui(*args: str, timeout: float = RUN_TIMEOUT, **kwargs) -> subprocess.CompletedProcess:
    """`python -m gradtui ARGS` from the repository, its output captured."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-m", "gradtui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        **kwargs,
    )


def record_with_fingerprints(path: str, script_path: str, *args: str) -> str:
    """`script_path ARGS` recorded to `path` headless with fingerprints, every pass per node
    (what `gradtui diff` and `--against` compare); the path, once the run succeeded."""
    run = gradtui(
        "--headless", "--record-all", "-c", "continue", "--record", path, "--fingerprints", script_path, *args
    )
    assert run.returncode == 0, run.stderr
    return path


@dataclass(frozen=True)
class Made:
    """A recording and the run that made it."""

    path: str
    run: subprocess.CompletedProcess


_folder = tempfile.TemporaryDirectory(prefix="gradtui-recordings-")  # removed when the test process ends


@functools.cache
def flight_recording() -> Made:
    """The acceptance recording (see module doc), made on first use."""
    path = os.path.join(_folder.name, "flight.db")
    run = gradtui(
        "--headless", "--flight", "5", "-c", "break nan", "-c", "continue", "--record", path, script("nan_at_30.py")
    )
    return Made(path, run)
