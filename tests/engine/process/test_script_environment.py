"""The script's environment is `python script.py args`'s: a probe script run
plainly and under gradtui (headless, a subprocess each) prints the same argv, sys.path[0],
__file__, __spec__, __package__, __name__, __builtins__ type and sys.modules["__main__"], and
pickles a class it defines. Plus the runner's other contracts: capture_output=False, structured
tracebacks, the quit status, and the hard exit of a script that swallows every quit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import gradtui
from gradtui.engine.process.runner import QUIT_STATUS, ScriptRunner
from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from tests.helpers import run_headless, script

GRADTUI_PACKAGE = os.path.join(os.path.dirname(os.path.realpath(gradtui.__file__)), "")
"""gradtui's own files: the folder of its package (not the checkout, whose path may say gradtui)."""

pytestmark = pytest.mark.timeout(120)

PROBE = """\
import json, pickle, sys

class Point:
    def __init__(self, x):
        self.x = x

main = sys.modules["__main__"]
g = globals()
print("PROBE " + json.dumps({
    "argv": sys.argv,
    "path0": sys.path[0],
    "file": __file__,
    "spec": repr(__spec__),
    "package": repr(__package__),
    "name": __name__,
    "builtins": type(__builtins__).__name__,
    "main_is_this_module": main.__dict__ is g,
    "loader": type(__loader__).__name__,
    "cached": repr(g.get("__cached__", "absent")),
    "doc": repr(__doc__),
    "pickled": pickle.loads(pickle.dumps(Point(3))).x,
    "globals": sorted(k for k in g if k.startswith("__")),
}))
"""


def _probe(output: str) -> dict:
    (line,) = [line for line in output.splitlines() if line.startswith("PROBE ")]
    return json.loads(line.removeprefix("PROBE "))


def _run(args: list[str], cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=90, env=env)


def test_the_script_sees_what_python_gives_it(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "probe.py").write_text(PROBE, encoding="utf-8")
    (tmp_path / "link").mkdir()
    os.symlink(real / "probe.py", tmp_path / "link" / "probe.py")  # python resolves links for sys.path[0]
    for path in ("real/probe.py", "link/probe.py"):
        plain = _run([path, "a", "--b"], tmp_path)
        assert plain.returncode == 0, plain.stderr
        debugged = _run(["-m", "gradtui", "--headless", path, "a", "--b"], tmp_path)
        assert debugged.returncode == 0, debugged.stderr + debugged.stdout
        expected, got = _probe(plain.stdout), _probe(debugged.stdout)
        assert got == expected
        assert expected["argv"] == [path, "a", "--b"] and expected["pickled"] == 3


def test_without_capture_output_the_runner_leaves_the_streams_alone(tmp_path, capfd):
    path = tmp_path / "prints.py"
    path.write_text(
        "import sys\nprint('to out')\nprint('to err', file=sys.stderr)\nprint(type(sys.stdout).__name__)\n",
        encoding="utf-8",
    )
    session = Session()
    events: list[ev.Event] = []
    session.add_listener(events.append)
    stdout = sys.stdout
    runner = ScriptRunner(str(path), [], session, capture_output=False)
    session.detach()
    thread = runner.start()
    thread.join(30)
    assert not thread.is_alive() and runner.exit_status == 0
    assert sys.stdout is stdout
    assert [e for e in events if isinstance(e, ev.Output)] == []  # nothing became an event
    out, err = capfd.readouterr()
    assert "to out\n" in out and "to err\n" in err
    assert f"{type(stdout).__name__}\n" in out


def test_an_exception_arrives_as_structured_frames_too():
    run = run_headless(script("hook_raises.py"))
    finished = run.finished
    error = finished.error
    assert error is not None and (error.exc_type, error.message) == ("ValueError", "bad hook")
    user = [f for f in error.frames if f.filename == script("hook_raises.py")]
    assert user[0].name == "<module>" and user[-1].name == "bad_hook"
    assert user[-1].line == 'raise ValueError("bad hook")' or "ValueError" in user[-1].line
    assert not any(os.path.realpath(f.filename).startswith(GRADTUI_PACKAGE) for f in error.frames)  # the
    # checkout's path may contain "gradtui" (its venv's torch frames too): gradtui's frames are its package's
    # The same frames as the text traceback, in the same order.
    assert [f'  File "{f.filename}", line {f.lineno}, in {f.name}' for f in error.frames] == [
        line for line in finished.traceback.splitlines() if line.startswith("  File ")
    ]


def test_a_clean_end_has_no_error():
    run = run_headless(script("chain.py"))
    assert run.finished.error is None and run.finished.exit_status == 0


def test_quit_ends_with_the_quit_status():
    run = run_headless(script("loop.py"), ["step", "quit"], ["3"])
    assert run.status == QUIT_STATUS == 130
    assert run.finished.exit_status == QUIT_STATUS and run.finished.quit


def test_headless_quit_exits_with_the_quit_status_in_a_subprocess():
    done = _run(["-m", "gradtui", "--headless", "-c", "quit", script("loop.py")], None)
    assert done.returncode == QUIT_STATUS, done.stdout + done.stderr
    assert "quit: the script was stopped" in done.stdout


SWALLOW_ALL = """\
import os, sys
import torch
x = torch.tensor([2.0], requires_grad=True)
stop = sys.argv[1] if len(sys.argv) > 1 else None  # the in-process test's way to end it
while not (stop and os.path.exists(stop)):
    try:
        (x * 3).sum().backward()
    except BaseException:
        pass
"""


def test_quit_ends_a_script_that_swallows_every_base_exception(tmp_path):
    path = tmp_path / "swallow_all.py"
    path.write_text(SWALLOW_ALL, encoding="utf-8")
    report = tmp_path / "report.json"
    done = _run(["-m", "gradtui", "--headless", "--report", str(report), "-c", "quit", str(path)], tmp_path)
    assert done.returncode == QUIT_STATUS, done.stdout + done.stderr
    assert "quit: the script was stopped" in done.stdout
    assert f"script exited with status {QUIT_STATUS}" in done.stdout
    data = json.loads(report.read_text(encoding="utf-8"))  # written before the hard exit
    assert data["exit_status"] == QUIT_STATUS and data["passes"]


def test_quit_ends_a_script_that_sleeps_after_swallowing_it(tmp_path):
    """A blocking C call (time.sleep) cannot take an async exception: the hard exit ends it."""
    path = tmp_path / "sleeper.py"
    path.write_text(
        "import time, torch\nx = torch.ones(1, requires_grad=True)\n"
        "try:\n    (x * 2).sum().backward()\nexcept BaseException:\n    time.sleep(600)\n",
        encoding="utf-8",
    )
    done = _run(["-m", "gradtui", "--headless", "-c", "quit", str(path)], tmp_path)
    assert done.returncode == QUIT_STATUS, done.stdout + done.stderr
    assert f"script exited with status {QUIT_STATUS}" in done.stdout


STUCK = """\
import os, sys
import torch
x = torch.ones(1, requires_grad=True)
try:
    (x * 2).sum().backward()
except BaseException:
    print("swallowed")
    os.read(int(sys.argv[1]), 1)  # blocked in a C call, where no async exception lands
"""


def test_the_watchdog_calls_hard_exit_after_the_grace(tmp_path):
    """In process, with a recording hard_exit: ScriptFinished first, then the exit, while the
    script is still stuck; a quit before the script starts needs none."""
    path = tmp_path / "stuck.py"
    path.write_text(STUCK, encoding="utf-8")
    exits: list[int] = []
    session = Session(provenance=False)
    before: list[ev.Event] = []
    session.add_listener(before.append)
    runner = ScriptRunner(str(path), ["0"], session, hard_exit=exits.append, grace=1.0)
    session.quit()
    assert runner.run() == QUIT_STATUS and exits == []
    assert before == [ev.ScriptFinished(QUIT_STATUS, None, True, 0)]  # never started, still announced

    read, write = os.pipe()
    session = Session(provenance=False)
    events: list[ev.Event] = []
    session.add_listener(events.append)
    session.add_listener(lambda e: isinstance(e, ev.Paused) and session.quit())
    runner = ScriptRunner(str(path), [str(read)], session, hard_exit=exits.append, grace=1.0)
    thread = runner.start()
    try:
        for _ in range(3000):  # at most 30 s
            if exits or not thread.is_alive():
                break
            thread.join(0.01)
        assert exits == [QUIT_STATUS] and thread.is_alive()  # ended by the hard exit, not by itself
        assert [e.text for e in events if isinstance(e, ev.Output)] == ["swallowed\n"]
        finished = [e for e in events if isinstance(e, ev.ScriptFinished)]
        assert len(finished) == 1 and finished[0].quit and finished[0].exit_status == QUIT_STATUS
        assert "hard exit" in finished[0].how
    finally:
        os.write(write, b"x")  # the script's read returns; the pending second stop ends it
        thread.join(30)
        os.close(read)
        os.close(write)
    assert not thread.is_alive() and runner.exit_status == QUIT_STATUS
    assert len([e for e in events if isinstance(e, ev.ScriptFinished)]) == 1  # never announced twice
