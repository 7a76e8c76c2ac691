"""Every run ends as `python script.py` ends (python is the oracle): SIGINT, SIGTERM, SIGHUP and a
KeyboardInterrupt raised in a tensor hook, in headless mode, the UI's child agent and a --listen
agent. The process dies of the same signal (a shell reports 128 + N), the report and the client
say 128 + N, and a --listen agent's runtime file is gone. Each test ends every process it starts."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from gradtui.protocol.options import RunOptions
from gradtui.record.reader import Recording
from gradtui.wire.child import ChildTarget
from tests.helpers import script
from tests.processes import EXIT_CASES, PROCESS_TIMEOUT, plain_exit_status, run_signalled

pytestmark = pytest.mark.timeout(240)


def _report_status(path: Path) -> int | None:
    return json.loads(path.read_text())["exit_status"]


@pytest.mark.parametrize("case", EXIT_CASES)
def test_headless_ends_as_python(case, tmp_path):
    signum, name = EXIT_CASES[case]
    report, db = tmp_path / "report.json", tmp_path / "run.db"
    code = run_signalled(
        [
            sys.executable,
            "-m",
            "gradtui",
            "--headless",
            "-c",
            "continue",
            "--report",
            str(report),
            "--record",
            str(db),
            script(name),
        ],
        signum,
    )
    assert code == plain_exit_status(case) < 0
    assert _report_status(report) == 128 - code
    recording = Recording(str(db))
    try:
        assert recording.run().exit_status == 128 - code
    finally:
        recording.close()


@pytest.mark.parametrize("case", EXIT_CASES)
def test_a_listen_agent_ends_as_python_and_removes_its_runtime_file(case, tmp_path):
    signum, name = EXIT_CASES[case]
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "GRADTUI_RUNTIME_DIR": str(runtime)}
    report = tmp_path / "report.json"
    attached: list[subprocess.CompletedProcess] = []

    def at_the_pause() -> None:  # the agent waits at the first node for a client
        deadline = time.monotonic() + PROCESS_TIMEOUT
        while not list(runtime.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        if signum is None:  # a client lets the pass run into the hook that raises
            attached.append(
                subprocess.run(
                    [sys.executable, "-m", "gradtui", "attach", "--headless", "-c", "continue"],
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=PROCESS_TIMEOUT,
                    stdin=subprocess.DEVNULL,
                )
            )
        else:
            time.sleep(1.0)  # `ready` is printed just before the backward that pauses

    command = [sys.executable, "-m", "gradtui", "--listen", "127.0.0.1:0", "--report", str(report), script(name)]
    code = run_signalled(command, signum, env, at_the_pause)
    if signum is None:
        assert attached[0].returncode == 0, attached[0].stderr  # it left after the failed pass
        assert "pass 0 failed: KeyboardInterrupt" in attached[0].stdout
    assert code == plain_exit_status(case) < 0
    assert _report_status(report) == 128 - code
    assert list(runtime.iterdir()) == []


@pytest.mark.parametrize("case", EXIT_CASES)
def test_the_uis_child_agent_ends_as_python(case, tmp_path):
    signum, name = EXIT_CASES[case]
    report = tmp_path / "report.json"
    target = ChildTarget(RunOptions(script(name), [], report=str(report)))

    async def drive() -> ev.ScriptFinished:
        await target.start()
        finished = []
        async for batch in target.batches():  # to their end: the child has gone, its returncode is in
            for event in batch:
                if isinstance(event, ev.Paused):  # the UI's first pause
                    if signum is None:
                        target.submit(parse("continue"))
                    else:
                        os.kill(target.process.pid, signum)  # type: ignore[union-attr]
                elif isinstance(event, ev.ScriptFinished):
                    finished.append(event)
        await target.process.wait()  # type: ignore[union-attr]
        assert len(finished) == 1, finished
        return finished[0]

    async def main() -> ev.ScriptFinished:
        try:
            return await asyncio.wait_for(drive(), PROCESS_TIMEOUT)
        finally:
            target.kill_now()

    finished = asyncio.run(main())
    code = target.process.returncode  # type: ignore[union-attr]
    assert code == plain_exit_status(case) < 0
    assert finished.exit_status == 128 - code
    assert _report_status(report) == 128 - code
