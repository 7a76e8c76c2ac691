"""Running the user's script (gradtui.engine.process.runner) as `python script.py args` would: argv,
__main__, its folder on sys.path, empty stdin, output as events, exit status and traceback."""

from __future__ import annotations

import os
import sys

import pytest

import gradtui
from gradtui.protocol import events as ev
from tests.helpers import SCRIPTS, output_of, run_headless, script

GRADTUI_PACKAGE = os.path.join(os.path.dirname(os.path.realpath(gradtui.__file__)), "")
"""gradtui's own files: the folder of its package (not the checkout, whose path may say gradtui)."""

pytestmark = pytest.mark.timeout(60)


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_script_sees_argv_main_its_folder_and_empty_stdin():
    saved = (sys.argv, list(sys.path), sys.stdout, sys.stderr, sys.stdin)
    run = run_headless(script("io_argv.py"), [], ["a", "--b", "c d"])
    assert run.status == 0, run.output
    outputs = [(e.stream, e.text) for e in run.of(ev.Output)]
    assert outputs == [
        ("stdout", "argv ['a', '--b', 'c d']\n"),
        ("stdout", "name __main__\n"),
        ("stdout", "sibling 42\n"),
        ("stderr", "to stderr\n"),
        ("stdout", "stdin is empty\n"),
        ("stdout", "done\n"),
    ]
    (started,) = run.of(ev.ScriptStarted)
    assert started.path == script("io_argv.py")
    assert started.argv == (script("io_argv.py"), "a", "--b", "c d")
    assert (sys.argv, sys.path, sys.stdout, sys.stderr, sys.stdin) == saved  # all restored
    assert str(SCRIPTS) not in sys.path


def test_partial_lines_are_flushed_at_the_end(tmp_path):
    path = write(tmp_path, "partial.py", "import sys\nprint('one\\ntwo', end='')\nsys.stderr.write('err')\n")
    run = run_headless(path)
    assert [(e.stream, e.text) for e in run.of(ev.Output)] == [
        ("stdout", "one\n"),
        ("stdout", "two"),
        ("stderr", "err"),
    ]


def test_streams_pass_for_the_real_ones(tmp_path):
    """What training scripts do to sys.stdout beyond print: reconfigure it, write bytes to its
    buffer (split inside a UTF-8 character here). Each used to raise AttributeError."""
    path = write(
        tmp_path,
        "streams.py",
        (
            "import sys\n"
            "sys.stdout.reconfigure(line_buffering=True)\n"
            "sys.stderr.reconfigure(write_through=True)\n"
            "data = 'bytés ✓\\n'.encode()\n"
            "sys.stdout.buffer.write(data[:4])\n"
            "sys.stdout.buffer.write(data[4:])\n"
            "sys.stdout.buffer.flush()\n"
            "print('text')\n"
        ),
    )
    run = run_headless(path)
    assert run.status == 0, run.output
    assert output_of(run.events) == "bytés ✓\ntext\n"


def test_captured_streams_have_the_real_file_descriptors(tmp_path):
    """`faulthandler.enable()` and friends ask sys.stderr.fileno(); it used to raise."""
    path = write(
        tmp_path,
        "fds.py",
        "import sys\n"
        "print(sys.stdout.fileno() == sys.__stdout__.fileno(), sys.stderr.fileno() == sys.__stderr__.fileno())\n",
    )
    run = run_headless(path)
    assert run.status == 0, run.output
    assert output_of(run.events) == "True True\n"


def test_stdin_is_empty_at_every_level(tmp_path):
    path = write(tmp_path, "stdin.py", "import sys\nprint(repr(sys.stdin.read()), sys.stdin.buffer.read())\n")
    run = run_headless(path)
    assert run.status == 0, run.output
    assert output_of(run.events) == "'' b''\n"


def test_exception_gives_status_1_a_trimmed_traceback_and_the_passes_so_far():
    run = run_headless(script("raises.py"))
    finished = run.finished
    assert run.status == 1 and finished.exit_status == 1 and not finished.quit
    tb = finished.traceback
    assert tb.startswith("Traceback (most recent call last):\n")
    assert tb.splitlines()[1] == f'  File "{script("raises.py")}", line 12, in <module>'
    assert 'in fail\n    raise ValueError("boom after one pass")' in tb
    assert tb.endswith("ValueError: boom after one pass\n")
    assert "gradtui" not in tb.replace(script("raises.py"), "") and "runpy" not in tb
    report = run.report.to_json()
    assert report["exit_status"] == 1 and report["error"] == tb
    assert len(report["passes"]) == 1 and report["passes"][0]["error"] is None
    assert tb in run.output and "script exited with status 1" in run.output


def test_exception_during_backward_has_no_gradtui_frames():
    run = run_headless(script("hook_raises.py"))
    tb = run.finished.traceback
    assert run.status == 1
    files = [line.split('"')[1] for line in tb.splitlines() if line.startswith('  File "')]
    assert files and not [f for f in files if os.path.realpath(f).startswith(GRADTUI_PACKAGE)]  # the checkout's
    # path may contain "gradtui" (a clone named so, its venv's torch): gradtui's own frames are its package's
    lines = tb.splitlines()
    assert lines[1].startswith(f'  File "{script("hook_raises.py")}", line 13')
    assert "in bad_hook" in tb and tb.endswith("ValueError: bad hook\n")
    (pass_end,) = run.of(ev.PassFinished)
    assert pass_end.error == "ValueError: bad hook"
    assert run.report.to_json()["passes"][0]["error"] == "ValueError: bad hook"


def test_syntax_error(tmp_path):
    path = write(tmp_path, "broken.py", "import torch\nx = (\n")
    run = run_headless(path)
    assert run.status == 1
    tb = run.finished.traceback
    assert f'File "{path}", line 2' in tb and "SyntaxError" in tb
    assert "gradtui" not in tb.replace(path, "")


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ("sys.exit(3)", 3, None),
        ("sys.exit(0)", 0, None),
        ("sys.exit()", 0, None),
        ("sys.exit('bad config')", 1, "bad config\n"),
        ("raise SystemExit(7)", 7, None),
    ],
)
def test_exit_status(tmp_path, body, status, message):
    run = run_headless(write(tmp_path, "exits.py", f"import sys\nprint('before')\n{body}\nprint('after')\n"))
    assert run.status == status and run.finished.exit_status == status
    assert run.finished.traceback == message
    assert output_of(run.events) == "before\n"


def test_exit_after_a_pass():
    run = run_headless(script("exit3.py"))
    assert run.status == 3
    assert run.report.to_json()["exit_status"] == 3 and len(run.report.passes) == 1
    assert "script exited with status 3" in run.output


def test_a_script_that_never_calls_backward():
    run = run_headless(script("no_backward.py"), ["step", "continue"])
    assert run.status == 0 and run.finished.passes == 0
    assert not run.pauses and not run.of(ev.PassStarted)
    assert "note: the script never called backward() or torch.autograd.grad()" in run.output
    assert output_of(run.events) == "forward only 2.0\n"
    assert run.report.to_json()["passes"] == []


def test_headless_prints_the_pause_and_the_script_output():
    run = run_headless(script("chain.py"), ["step", "continue"])
    lines = run.output.splitlines()
    assert lines[0] == "pass 0 · z.backward() at chain.py:10 · loss 36 · 3 nodes"
    assert lines[1] == "paused before #0 PowBackward0 (z) · pass 0 · 0/3 done · step"
    assert lines[2] == "  at chain.py:9: z = y ** 2"
    assert "(gradtui) step" in lines
    assert "paused before #1 MulBackward0 (y) · pass 0 · 1/3 done · step" in lines
    assert "  in[0] [1] float32 cpu  norm 12  min 12  max 12  mean 12  values [12]" in lines
    assert lines[-3:] == ["pass 0 done · 3/3 nodes ran", "x.grad = 36.0", "script exited with status 0"]
