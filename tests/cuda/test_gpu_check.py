"""benchmarks/gpu_check.sh, the one command for a GPU machine: its dry run goes to its end on
any machine (with an empty wheels folder), says whether CUDA is there and exits 0; the CUDA rows
say why there are none where CUDA is absent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(150)


def test_the_dry_run_goes_to_its_end_and_says_whether_cuda_is_there(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    report = tmp_path / "report.md"
    env = {**os.environ, "PYTHON": sys.executable, "GRADTUI_WHEELS": str(wheels)}
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--dry-run", "--report", str(report)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # the steps it would run: the wheels with no index, gradtui with no deps, the posthooks' build
    assert f"--no-index --find-links {wheels}" in done.stdout
    assert "--no-deps --no-build-isolation -e" in done.stdout
    assert "-m gradtui.engine.hooks.native" in done.stdout
    text = report.read_text()
    assert "Dry run: nothing was installed" in text
    assert ("CUDA: **absent**" in text) == (not torch.cuda.is_available())


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is here: gpu_check.sh measures the rows")
def test_without_cuda_the_cuda_rows_say_so_and_are_none():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_cuda import markdown, run

    result = run(quick=True, device=torch.device("cuda"))
    assert result["rows"] == [] and result["cuda"] is None
    assert "CUDA is not available on this machine" in markdown(result)


def test_an_unknown_option_is_refused():
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--bogus"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2 and "unknown option --bogus" in done.stderr
