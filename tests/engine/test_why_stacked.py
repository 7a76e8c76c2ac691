"""`why NAME` for a variable of the script, and the classic forum question.

A model returns stacked per-step outputs a_s, b_s, c_s inside a training loop and the user wants
their gradients. Under gradtui, without changing the script, every pass shows by name the
gradient of each one on the loss's graph, equal to what retain_grad() inside the model gives,
and `why` says plainly which of them are not on it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch

from gradtui.protocol import events as ev
from tests.helpers import REPO, Run, output_of, run_headless, run_plain, script

pytestmark = pytest.mark.timeout(60)

STEPS = 3


def answers(run: Run) -> dict[tuple[int, str], str]:
    """(pass index, name) -> the text `why name` answered while paused in that pass."""
    out, current = {}, None
    for event in run.events:
        if isinstance(event, ev.Paused):
            current = event.pass_index
        elif isinstance(event, ev.CommandResult) and event.command.startswith("why "):
            assert event.ok, event
            out[(current, event.command.removeprefix("why "))] = event.text
    return out


def assert_not_on_the_graph(name: str, text: str) -> None:
    """`why` says plainly that the tensor is off this pass's graph and that its .grad stays None."""
    assert not text.startswith("yes"), text
    assert "not" in text, text
    assert f"{name}.grad" in text and "None" in text, text


@pytest.fixture(scope="module")
def stacked(tmp_path_factory) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], Run]:
    """cov_stacked.py run plainly with retain_grad() inside the model, and under gradtui as the
    user wrote it (no retain_grad), asking `why` in the first and last pass."""
    tmp = tmp_path_factory.mktemp("stacked")
    run_plain(script("cov_stacked.py"), [str(tmp / "retained.pt"), "retain"])
    whys = ["why a_s", "why b_s", "why c_s"]
    run = run_headless(
        script("cov_stacked.py"),
        [*whys, f"break pass {STEPS - 1}", "continue", *whys, "continue"],
        [str(tmp / "debugged.pt")],
    )
    assert run.status == 0, run.output
    return torch.load(tmp / "retained.pt"), torch.load(tmp / "debugged.pt"), run


def test_training_is_unchanged(stacked):
    retained, debugged, run = stacked
    params = {k: v for k, v in retained.items() if not k.startswith(("a_s", "b_s"))}
    assert sorted(params) == sorted(debugged)
    for name, grad in params.items():
        assert torch.equal(grad, debugged[name]), name
    assert len(run.of(ev.PassStarted)) == STEPS
    assert output_of(run.events).count("loss") == STEPS


@pytest.mark.parametrize("name", ["a_s", "b_s"])
def test_every_pass_shows_the_stacked_output_gradient_by_name(stacked, name):
    """The report node labelled a_s (b_s) in pass k has the gradient a_s.grad has after
    retain_grad() inside the model, in step k, bit for bit."""
    retained, _, run = stacked
    passes = run.report.to_json()["passes"]
    assert len(passes) == STEPS
    for step, report in enumerate(passes):
        (node,) = [n for n in report["nodes"] if name in n["labels"]]
        assert node["name"] == "StackBackward0"
        (arrived,) = node["grad_outputs"]
        want = retained[f"{name}.{step}"]
        assert arrived["shape"] == list(want.shape) and len(arrived["values"]) == want.numel()
        assert torch.equal(torch.tensor(arrived["values"]), want.flatten()), (step, name)


def test_break_on_a_stacked_output_by_name_shows_its_gradient_in_every_pass(stacked, tmp_path):
    retained, _, _ = stacked
    run = run_headless(script("cov_stacked.py"), ["break a_s"] + ["continue"] * (STEPS + 1), [str(tmp_path / "g.pt")])
    assert run.status == 0, run.output
    at_a_s = [p for p in run.pauses if p.reason == "breakpoint 1: a_s"]
    assert [p.pass_index for p in at_a_s] == list(range(STEPS))
    for pause in at_a_s:
        assert pause.name == "StackBackward0"
        want = retained[f"a_s.{pause.pass_index}"]
        assert torch.equal(torch.tensor(pause.grads[0].values), want.flatten()), pause.pass_index


def test_c_s_is_on_no_pass_graph(stacked):
    _, _, run = stacked
    for report in run.report.to_json()["passes"]:
        assert not [n for n in report["nodes"] if "c_s" in n["labels"]]


def test_why_tells_which_stacked_outputs_are_on_the_graph(stacked):
    _, _, run = stacked
    said = answers(run)
    assert sorted(said) == sorted((p, n) for p in (0, STEPS - 1) for n in ("a_s", "b_s", "c_s"))
    for index in (0, STEPS - 1):
        for name in ("a_s", "b_s"):
            assert said[(index, name)].startswith(f"yes: {name} is made by #"), said[(index, name)]
            assert "StackBackward0" in said[(index, name)]
        text = said[(index, "c_s")]
        assert_not_on_the_graph("c_s", text)
        assert "on this pass's graph" in text or "does not depend on it" in text, text


def test_the_report_written_by_the_command_line_names_the_stacked_gradients(stacked, tmp_path):
    """The same through `gradtui --headless --report`, as the user would run it: in every pass
    of the JSON report, the node labelled a_s carries a_s's retain_grad() gradient, exactly."""
    retained, _, _ = stacked
    report_path = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gradtui",
            "--headless",
            "-c",
            "why c_s",
            "-c",
            "continue",
            "--report",
            str(report_path),
            script("cov_stacked.py"),
            str(tmp_path / "g.pt"),
        ],
        capture_output=True,
        text=True,
        timeout=50,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "c_s" in done.stdout and "not on" in done.stdout
    with open(report_path, encoding="utf-8") as handle:
        report = json.load(handle)
    assert len(report["passes"]) == STEPS
    for step, data in enumerate(report["passes"]):
        for name in ("a_s", "b_s"):
            (node,) = [n for n in data["nodes"] if name in n["labels"]]
            values = node["grad_outputs"][0]["values"]
            assert torch.equal(torch.tensor(values), retained[f"{name}.{step}"].flatten()), (step, name)


# ---- every reason `why` gives --------------------------------------------------------------


@pytest.fixture(scope="module")
def reasons() -> dict[str, str]:
    names = ["x", "frozen", "detached", "under_no_grad", "h", "kept", "unused_leaf", "beside"]
    run = run_headless(script("cov_why_reasons.py"), [f"why {n}" for n in names] + ["continue"])
    assert run.status == 0, run.output
    assert output_of(run.events) == "kept.grad [5.0, 10.0]\n"
    said = {name: text for (_, name), text in answers(run).items()}
    assert sorted(said) == sorted(names)
    return said


def test_why_a_leaf_on_the_graph(reasons):
    assert reasons["x"].startswith("yes: x is a leaf on this graph")


def test_why_a_non_leaf_on_the_graph_without_retain_grad(reasons):
    text = reasons["h"]
    assert text.startswith("yes: h is made by #")
    assert "h.grad" in text and "None" in text and "h.retain_grad()" in text


def test_why_a_non_leaf_that_retains_its_grad(reasons):
    """kept.retain_grad() was called: its .grad will be filled, so `why` must not say it stays None."""
    text = reasons["kept"]
    assert text.startswith("yes: kept is made by #")
    assert "stays None" not in text, text


def test_why_requires_grad_false(reasons):
    text = reasons["frozen"]
    assert_not_on_the_graph("frozen", text)
    assert "require" in text  # requires_grad is False


@pytest.mark.parametrize(
    ("name", "reason"), [("detached", r"detach"), ("under_no_grad", r"no[_ ]grad")], ids=["detached", "under_no_grad"]
)
def test_why_detached_or_made_under_no_grad(reasons, name, reason):
    text = reasons[name]
    assert_not_on_the_graph(name, text)
    assert re.search(reason, text.replace(name, "NAME")), text  # the reason, not just the variable's name


@pytest.mark.parametrize("name", ["unused_leaf", "beside"])
def test_why_the_loss_does_not_use_it(reasons, name):
    text = reasons[name]
    assert_not_on_the_graph(name, text)
    assert "does not depend on it" in text or "not use" in text, text
