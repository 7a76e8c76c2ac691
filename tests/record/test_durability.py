"""No lost result (issues 11.9 and 13.3): SIGKILL, SIGTERM and SIGHUP mid-run leave a recording
that opens and a report that parses, each with every pass that had ended; a report that cannot
be written says so in one line and the exit status shows it."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading

import pytest

from gradtui.protocol.report import JsonStream
from gradtui.record.export import to_json
from gradtui.record.reader import Recording
from tests.helpers import REPO, example, script

pytestmark = pytest.mark.timeout(120)

WAIT = 60.0
"""Seconds to wait for the script to reach the step the test kills it at."""


def _default_signals() -> None:
    """The run's signals at their defaults, as in a terminal: a suite started under `nohup`
    would otherwise hand it an ignored SIGHUP, which it rightly keeps ignoring."""
    for sig in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def start(*args: str) -> tuple[subprocess.Popen, queue.Queue]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    process = subprocess.Popen(
        [sys.executable, "-m", "gradtui", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
        env=env,
        preexec_fn=_default_signals,
    )
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return process, lines


def kill_at_step(process: subprocess.Popen, lines: queue.Queue, step: int, sig: int) -> int:
    """Wait (with a timeout) until the script printed `step N`, send `sig`, reap it; the last step printed."""
    try:
        while True:
            line = lines.get(timeout=WAIT)
            assert line is not None, "the run ended before it was killed"
            if line.startswith("step ") and int(line.split()[1]) >= step:
                last = int(line.split()[1])
                break
        process.send_signal(sig)
        process.wait(timeout=WAIT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=WAIT)
    assert process.returncode == -sig
    return last


def test_sigkill_mid_loop_leaves_a_recording_that_opens_with_every_ended_pass(tmp_path):
    db = tmp_path / "run.db"
    process, lines = start(
        "--headless", "--record", str(db), "--record-every", "1", "-c", "continue", script("endless_loop.py")
    )
    last = kill_at_step(process, lines, 10, signal.SIGKILL)
    with Recording(str(db)) as recording:
        passes = recording.passes()
        assert len(passes) >= last + 1  # "step N" is printed after pass N ended
        assert [p.index for p in passes] == list(range(len(passes)))
        assert all(p.per_node and recording.stats(p.index) and recording.flow(p.index) for p in passes)
        assert recording.run().exit_status is None  # it never finished
    assert to_json(str(db), str(tmp_path / "r.json")) is None
    assert len(json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["passes"]) == len(passes)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_mid_run_leaves_a_report_with_every_ended_pass(tmp_path, sig):
    report = tmp_path / "r.json"
    db = tmp_path / "run.db"
    process, lines = start(
        "--headless", "--report", str(report), "--record", str(db), "-c", "continue", script("endless_loop.py")
    )
    last = kill_at_step(process, lines, 5, sig)
    text = report.read_text(encoding="utf-8")
    assert "\n" not in text.strip()  # compact
    data = json.loads(text)
    assert len(data["passes"]) >= last + 1
    assert [p["index"] for p in data["passes"]] == list(range(len(data["passes"])))
    assert all(p["nodes"] and p["nodes"][0]["grad_outputs"] for p in data["passes"])
    assert data["exit_status"] == 128 + sig  # as python, killed by it, exits (143, 129)
    with Recording(str(db)) as recording:
        assert len(recording.passes()) >= last + 1


def test_a_report_on_a_full_disk_fails_in_one_line_with_a_nonzero_status():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "gradtui", "--headless", "-c", "continue", "--report", "/dev/full", example("chain.py")],
        capture_output=True,
        text=True,
        timeout=WAIT,
        cwd=REPO,
        env=env,
    )
    assert "x.grad = 36.0" in done.stdout  # the script ran and its output is there
    ours = [line for line in done.stderr.splitlines() if line.startswith("gradtui:")]
    assert ours == ["gradtui: could not write the report /dev/full: No space left on device"], done.stderr
    assert "Traceback" not in done.stderr
    assert done.returncode == 2


def test_a_report_whose_folder_is_removed_mid_run_is_written_again(tmp_path):
    path = tmp_path / "out" / "r.json"
    path.parent.mkdir()
    stream = JsonStream(str(path))
    stream.add_pass({"index": 0, "nodes": []}, {"script": "s.py"})
    shutil.rmtree(path.parent)
    stream.add_pass({"index": 1, "nodes": []}, {})
    stream.close({"exit_status": 0})
    assert stream.failed is None
    data = json.loads(path.read_text(encoding="utf-8"))
    assert [p["index"] for p in data["passes"]] == [0, 1]
    assert data["script"] == "s.py" and data["exit_status"] == 0


def test_the_streamed_report_is_a_valid_document_after_every_pass(tmp_path):
    path = tmp_path / "r.json"
    stream = JsonStream(str(path))
    assert json.loads(path.read_text(encoding="utf-8"))["passes"] == []
    for i in range(3):
        stream.add_pass({"index": i, "losses": ["nan"]}, {"breakpoint_hits": [{"pass": i}] * (i + 1)})
        data = json.loads(path.read_text(encoding="utf-8"))
        assert [p["index"] for p in data["passes"]] == list(range(i + 1))
        assert len(data["breakpoint_hits"]) == i + 1
    stream.close({"exit_status": 3})
    assert json.loads(path.read_text(encoding="utf-8"))["exit_status"] == 3
