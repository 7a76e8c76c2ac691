"""A recorded run whose process died without unwinding (`os._exit(7)`, a SIGSEGV): the recording
says how it ended where the process that started it saw it (the UI's child agent: its supervisor
writes the status and the signal in), and says the end is unknown where nobody saw it (a headless
run is the script's own process) — never "exited with status 0"."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest

from gradtui.cli.main import _recorded_end
from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from gradtui.protocol.options import RunOptions
from gradtui.record.ending import UNKNOWN_END
from gradtui.wire.child import ChildTarget
from tests.helpers import script
from tests.processes import PROCESS_TIMEOUT, gradtui

pytestmark = pytest.mark.timeout(300)

CASES = {
    "exit7": (7, "exited with status 7"),
    "segv": (128 + signal.SIGSEGV, "was killed by SIGSEGV (Segmentation fault)"),
}


def replayed_and_exported(db: str, tmp_path) -> tuple[str, dict]:
    """`gradtui replay --headless DB`'s output and `gradtui export`'s JSON."""
    replay = gradtui("replay", "--headless", "-c", "continue", db)
    assert replay.returncode == 0, replay.stderr
    exported = os.path.join(tmp_path, "export.json")
    done = gradtui("export", db, "--json", exported)
    assert done.returncode == 0, done.stderr
    with open(exported, encoding="utf-8") as f:
        return replay.stdout, json.load(f)


@pytest.mark.parametrize("case", CASES)
def test_a_headless_run_that_died_replays_and_exports_as_unknown_not_status_0(case, tmp_path):
    db = os.path.join(tmp_path, "run.db")
    run = gradtui("--headless", "-c", "continue", "--record", db, script("dies.py"), case)
    status, how = CASES[case]
    assert run.returncode in (status, -signal.SIGSEGV) and "grad 3.0" in run.stdout, run.stderr
    out, data = replayed_and_exported(db, tmp_path)
    assert "exited with status 0" not in out, out
    assert out.rstrip().splitlines()[-2:] == [f"the script's process {UNKNOWN_END}", "script exit status unknown"], out
    assert data["exit_status"] is None and data["how"] == UNKNOWN_END


@pytest.mark.parametrize("case", CASES)
def test_a_ui_childs_run_that_died_is_recorded_with_the_status_its_supervisor_saw(case, tmp_path):
    db = os.path.join(tmp_path, "run.db")
    options = RunOptions(script("dies.py"), [case], record=db, commands=["continue"])
    target = ChildTarget(options, _recorded_end(db))  # as `gradtui --record DB SCRIPT` makes it for the UI

    async def drive() -> list[ev.Event]:
        await target.start()
        events: list[ev.Event] = []
        async for batch in target.batches():
            for event in batch:
                events.append(event)
                if isinstance(event, ev.Paused):
                    target.submit(parse("continue"))
        return events

    async def main() -> list[ev.Event]:
        try:
            return await asyncio.wait_for(drive(), PROCESS_TIMEOUT)
        finally:
            target.kill_now()

    events = asyncio.run(main())
    status, how = CASES[case]
    end = events[-1]
    assert isinstance(end, ev.ScriptFinished) and (end.exit_status, end.how) == (status, how)
    out, data = replayed_and_exported(db, tmp_path)
    assert out.rstrip().splitlines()[-2:] == [f"the script's process {how}", f"script exited with status {status}"], out
    assert data["exit_status"] == status and data["how"] == how
