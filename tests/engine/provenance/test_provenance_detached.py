"""Provenance stops once a detached session can capture no more passes (the forward runs at
plain speed), and keeps recording while passes are still hooked for a report or recording."""

from __future__ import annotations

import textwrap

import pytest

from tests.helpers import run_headless

SCRIPT = textwrap.dedent("""
    import torch
    from gradtui.engine.provenance.forward import SOURCE_KEY
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    for step in range(3):
        loss = (w * 2.0).sum()
        modes = torch._C._len_torch_function_stack()
        print(f"step {step}: modes {modes}, labelled {SOURCE_KEY in loss.grad_fn.metadata}", flush=True)
        loss.backward()
""")


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "steps.py"
    path.write_text(SCRIPT)
    return str(path)


def _steps(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("step ")]


def test_detached_without_hooked_passes_stops_provenance(script):
    run = run_headless(script, ["continue"], sole=True, hook_all_passes=False)
    assert run.status == 0, run.output
    assert _steps(run.output) == [
        "step 0: modes 1, labelled True",
        "step 1: modes 0, labelled False",
        "step 2: modes 0, labelled False",
    ], run.output


def test_a_breakpoint_still_armed_keeps_provenance(script):
    run = run_headless(script, ["break AddmmBackward0", "continue"], sole=True, hook_all_passes=False)
    assert run.status == 0, run.output
    assert _steps(run.output) == [f"step {i}: modes 1, labelled True" for i in range(3)], run.output


def test_passes_hooked_for_a_report_keep_provenance(script):
    run = run_headless(script, ["continue"], sole=True, hook_all_passes=True)
    assert run.status == 0, run.output
    assert _steps(run.output) == [f"step {i}: modes 1, labelled True" for i in range(3)], run.output
