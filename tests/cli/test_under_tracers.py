"""gradtui under a profiler or a tracer (cProfile, coverage, a debugger): the run ends as it does
without one. CPython 3.11 leaves a thread's eval breaker set for good after
`PyThreadState_SetAsyncExc(id, NULL)`, and with a profile or trace function on, the interpreter
then spins at the next function entry: gradtui cleared its async quit that way at every script's
end, so `python -m cProfile -m gradtui ...` never returned."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.timeout(120)

SCRIPT = """\
import torch
x = torch.ones(3, requires_grad=True)
(x * 2).sum().backward()
print("script done")
"""

UNDER = {
    "setprofile": "sys.setprofile(lambda *a: None)",
    "settrace": "sys.settrace(lambda *a: None)",
}


def run(code: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        return subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=90, cwd=cwd, env=env
        )
    except subprocess.TimeoutExpired as exc:  # subprocess.run has killed it
        pytest.fail(f"still running after 90 s (it spins):\n{exc.stdout}\n{exc.stderr}")


@pytest.mark.parametrize("hook", sorted(UNDER))
def test_a_headless_run_under_a_profiler_or_tracer_ends_with_the_scripts_status(tmp_path, hook):
    (tmp_path / "tiny.py").write_text(SCRIPT)
    code = (
        f"import sys, runpy\n{UNDER[hook]}\n"
        "sys.argv = ['gradtui', '--headless', '-c', 'continue', 'tiny.py']\n"
        "runpy.run_module('gradtui', run_name='__main__')\n"
    )
    done = run(code, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "script done" in done.stdout and "script exited with status 0" in done.stdout


def test_cancelling_a_quit_that_arrived_leaves_a_profiled_interpreter_running(tmp_path):
    """What the runner does when its quit reached the script already: the cancel delivers and
    catches its own exception, so nothing stays pending."""
    code = (
        "import sys\nfrom gradtui.engine.process.runner import _cancel_async_exception\n"
        "_cancel_async_exception()\nsys.setprofile(lambda *a: None)\n"
        "def f():\n    return 1\nprint('called', f())\n"
    )
    done = run(code, tmp_path)
    assert done.returncode == 0 and "called 1" in done.stdout, done.stderr[-2000:]
