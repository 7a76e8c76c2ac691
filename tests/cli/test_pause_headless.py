"""`pause` for headless and attached clients: a loop script under `gradtui --listen`; one client
continues it and leaves it running (its commands ran out), a second attaches while it runs and
breaks in with `-c pause`: the engine pauses at a backward node of a later pass, the script
alive (the client's `print` is answered there, the agent still runs), and `quit` ends it. In one
headless run, `-c continue -c pause` breaks in at the next node. And `!STATEMENT` headless: the
gradient it prints is torch's, and an assignment to g is an edit a recording keeps."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

from tests.helpers import REPO, example, script
from tests.processes import PROCESS_TIMEOUT, Listening

pytestmark = pytest.mark.timeout(180)

ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _gradtui(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gradtui", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=ENV,
        timeout=PROCESS_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )


def test_an_attached_client_breaks_in_to_a_running_loop(tmp_path):
    agent = Listening(script("endless_loop.py"), tmp_path)
    try:
        address = agent.wait_listening()
        first = agent.attach(address, "--headless", "-c", "continue")
        assert first.returncode == 0, first.stderr
        assert "detached: the script runs on" in first.stdout
        agent.wait_stdout(b"step 3\n")  # running on, with no client
        second = agent.attach(address, "--headless", "-c", "pause", "-c", "print", "-c", "quit")
        assert second.returncode == 0, second.stdout + second.stderr
        out = second.stdout
        paused = re.search(r"^paused before #\d+ (\w+)(?: \(\w+\))? · pass (\d+) · \d+/\d+ done · break in$", out, re.M)
        assert paused, out
        assert paused.group(1).endswith(("Backward0", "Backward1")) or paused.group(1) == "AccumulateGrad"
        assert int(paused.group(2)) >= 3, out  # a pass of the loop that ran on, not the first
        answered = out.split(paused.group(0), 1)[1]
        assert "(gradtui) print" in answered and "in[0] " in answered  # answered at the pause: the script alive
        assert agent.wait(PROCESS_TIMEOUT) == 130  # the client's quit, at the pause, stopped the script
    finally:
        agent.close()


def test_headless_continue_then_pause_breaks_in_at_the_next_node():
    done = _gradtui("--headless", "-c", "continue", "-c", "pause", "-c", "quit", script("endless_loop.py"))
    assert done.returncode == 130, done.stderr
    assert "  pausing at the next node of the backward pass in flight" in done.stdout
    assert re.search(r"^paused before #1 PowBackward0 · pass 0 · 1/\d+ done · break in$", done.stdout, re.M), (
        done.stdout
    )


def _dz_dy() -> torch.Tensor:
    """chain.py's gradient arriving at #1 (MulBackward0 of y = x * 3): dz/dy, by torch."""
    x = torch.tensor([2.0], requires_grad=True)
    y = x * 3
    y.retain_grad()
    (y**2).backward()
    return y.grad


def test_bang_prints_at_the_pause_to_the_client():
    done = _gradtui(
        "--headless", "-c", "step", "-c", "!print(float(g.sum()) * 7)", "-c", "continue", example("chain.py")
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    i = lines.index("(gradtui) !print(float(g.sum()) * 7)")
    assert lines[i + 1].strip() == repr(float(_dz_dy().sum()) * 7)
    assert "x.grad = 36.0" in lines  # nothing changed: torch's dz/dx = 18 x


def test_bang_names_are_kept_for_the_pause_and_g_is_an_edit_a_recording_keeps(tmp_path):
    db = tmp_path / "run.db"
    done = _gradtui(
        "--headless",
        "--record",
        str(db),
        "-c",
        "step",
        "-c",
        "!half = g * 0.5",
        "-c",
        "!g = half",
        "-c",
        "!print(node.name(), float(g.sum()))",
        "-c",
        "continue",
        example("chain.py"),
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"MulBackward0 {float(_dz_dy().sum()) * 0.5}" in out  # g is the edited gradient now
    assert "x.grad = 18.0" in out  # half of torch's 36 went on to x
    from gradtui.record.reader import open_recording

    recording = open_recording(str(db))
    try:
        edits = recording.edits()
    finally:
        recording.close()
    assert [(e["pass"], e["node"], e["command"]) for e in edits] == [(0, 1, "!g = half")]


def test_bang_refuses_a_g_of_another_shape_and_g_is_the_gradient_again():
    done = _gradtui(
        "--headless",
        "-c",
        "step",
        "-c",
        "!g = torch.ones(2)",
        "-c",
        "!print(g.shape)",
        "-c",
        "continue",
        example("chain.py"),
    )
    assert done.returncode == 0, done.stderr
    assert "error: 'g = torch.ones(2)' gave a tensor with shape [2] instead of [1]" in done.stdout
    assert "torch.Size([1])" in done.stdout and "x.grad = 36.0" in done.stdout


def test_bang_names_the_node_its_module_and_the_call_site_variables():
    """endless_loop.py's third node is the last Linear's addmm (model.2): `module` is that very
    module of the script's `model`, `node` the autograd node, `step` and `loss` the loop's own."""
    done = _gradtui(
        "--headless",
        "-c",
        "step",
        "-c",
        "step",
        "-c",
        "!print(module is model[2], type(node).__name__, node is loss.grad_fn.next_functions[0][0]"
        ".next_functions[0][0], step)",
        "-c",
        "quit",
        script("endless_loop.py"),
    )
    lines = done.stdout.splitlines()
    i = lines.index(next(line for line in lines if line.startswith("(gradtui) !print(module")))
    assert lines[i + 1].strip() == "True AddmmBackward0 True 0", done.stdout
