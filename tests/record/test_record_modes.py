"""`--record` in every mode: the UI's child agent, `--listen` with a client
attached, and `gradtui.listen(record=...)` in a process gradtui did not launch. Each run is
nan_at_30.py for 3 steps (or a 3-step loop for listen()); the recorded gradient norms are
checked against the ones torch printed in the same run."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from gradtui.clients.feeder import CommandFeeder
from gradtui.protocol import events as ev
from gradtui.protocol.options import RunOptions
from gradtui.record.reader import Recording
from gradtui.wire.child import ChildTarget
from tests.helpers import REPO, script
from tests.processes import PROCESS_TIMEOUT

pytestmark = pytest.mark.timeout(120)

NAMES = ["0.weight", "0.bias", "2.weight", "2.bias"]
"""nan_at_30.py's parameters, in the order it prints their gradient norms."""


def assert_flow_is_torchs(db: str, steps: int, text: str | None = None) -> Recording:
    """Every pass's recorded flow equals the norms the script printed (torch's: `text`, else the
    recorded output); the recording, open."""
    recording = Recording(db)
    if text is None:
        text = "".join(line.text for line in recording.output())
    printed = {
        int(w[1]): [float(x) for x in w[3:]]
        for w in (line.split() for line in text.splitlines())
        if w and w[0] == "step"
    }
    passes = recording.passes()
    assert [p.index for p in passes] == list(range(steps))
    for p in passes:
        by_name = {r.name: r.grad_norm for r in recording.flow(p.index)}
        assert [by_name[n] for n in NAMES] == printed[p.index], p.index
    return recording


def test_the_ui_child_agent_records(tmp_path):
    """What `gradtui --record run.db train.py` runs: the UI's ChildTarget with these options;
    the script's output lines are recorded too, in every mode."""
    db = str(tmp_path / "ui.db")
    target = ChildTarget(RunOptions(script("nan_at_30.py"), ["3"], record=db))

    async def drive() -> list[ev.Event]:
        await target.start()
        feeder = CommandFeeder(["continue"])
        seen: list[ev.Event] = []
        async for batch in target.batches():
            for event in batch:
                seen.append(event)
                if feeder.due(event) and (typed := feeder.pop()) is not None:
                    assert typed.command is not None, typed.error
                    feeder.sent(target.submit(typed.command))
        return seen

    async def main() -> list[ev.Event]:
        try:
            return await asyncio.wait_for(drive(), PROCESS_TIMEOUT)
        finally:
            target.kill_now()

    seen = asyncio.run(main())
    [end] = [e for e in seen if isinstance(e, ev.ScriptFinished)]
    assert end.exit_status == 0
    # The child's output reaches the UI through its pipes, and the recording through the agent's
    # teed streams: the same lines, each filed under the pass that printed it.
    printed = "".join(e.text for e in seen if isinstance(e, ev.Output) and e.stream == "stdout")
    assert printed.count("\n") == 3
    with assert_flow_is_torchs(db, 3, printed) as recording:
        recorded = [line for line in recording.output() if line.stream == "stdout"]
        assert "".join(line.text for line in recorded) == printed
        assert [(line.pass_index, line.text.split()[:2]) for line in recorded] == [
            (step, ["step", str(step)]) for step in range(3)
        ]
        assert [p.index for p in recording.passes() if p.per_node] == [0]  # the pass it paused in
        assert recording.stats(0) and recording.run().exit_status == 0


def test_listen_records_with_a_client_attached(tmp_path):
    db = str(tmp_path / "listen.db")
    env = {
        **os.environ,
        "GRADTUI_RUNTIME_DIR": str(tmp_path),
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gradtui",
            "--listen",
            "127.0.0.1:0",
            "--record",
            db,
            "--record-every",
            "1",
            script("nan_at_30.py"),
            "3",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=REPO,
        text=True,
    )
    try:
        address = None
        deadline = time.monotonic() + PROCESS_TIMEOUT
        while address is None and time.monotonic() < deadline:
            line = agent.stderr.readline()  # the agent says where it listens before the script runs
            assert line, "the agent ended before it listened"
            found = re.search(r"agent listening on (\S+) ", line)
            address = found.group(1) if found else None
        done = subprocess.run(
            [sys.executable, "-m", "gradtui", "attach", address, "--headless", "-c", "continue"],
            capture_output=True,
            text=True,
            env=env,
            timeout=PROCESS_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, done.stderr
        assert agent.wait(PROCESS_TIMEOUT) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
        agent.wait(10)
        agent.stderr.close()
    with assert_flow_is_torchs(db, 3) as recording:
        assert [p.index for p in recording.passes() if p.per_node] == [0, 1, 2]  # --record-every 1
        assert recording.run().exit_status == 0


LISTENS = textwrap.dedent("""
    import sys
    import torch
    import gradtui

    w = torch.tensor([2.0], requires_grad=True)
    with gradtui.listen(break_on="pass 99", record=sys.argv[1], record_every=1):
        for step in range(3):
            ((w * 3) ** 2).backward()
            print(f"step {step} grad {w.grad.item()}", flush=True)
            w.grad = None
        print("unfinished", end="", file=sys.stderr)
    print("after close")
""")


def test_gradtui_listen_records_the_process_passes(tmp_path):
    """No client ever attaches: nothing pauses (the breakpoint is for pass 99), every pass is
    hooked (record_every=1), and close() ends the recording's run."""
    path, db = tmp_path / "listens.py", str(tmp_path / "listen.db")
    path.write_text(LISTENS, encoding="utf-8")
    env = {
        **os.environ,
        "GRADTUI_RUNTIME_DIR": str(tmp_path),
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    done = subprocess.run(
        [sys.executable, str(path), db],
        capture_output=True,
        text=True,
        env=env,
        timeout=PROCESS_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.splitlines()] == [f"step {i} grad 36.0" for i in range(3)] + ["after close"]
    assert done.stderr.endswith("unfinished")
    with Recording(db) as recording:
        passes = recording.passes()
        assert [(p.index, p.per_node) for p in passes] == [(0, True), (1, True), (2, True)]
        for p in passes:
            [leaf] = [r for r in recording.flow(p.index)]
            assert leaf.grad_norm == 36.0
            graph, stats = recording.graph(p.index), recording.stats(p.index)
            [acc] = [n for n, d in graph.nodes(data="info") if d.kind == "accumulate"]
            assert stats[acc].grad_outputs[0].norm == 36.0  # what reached w, as torch computed it
        run = recording.run()
        assert run.script == str(path) and run.finished is not None and run.how == "gradtui.listen() closed"
        # the process's lines, each under the pass that printed it; none from before or after
        assert [(line.pass_index, line.stream, line.text) for line in recording.output()] == [
            *[(step, "stdout", f"step {step} grad 36.0\n") for step in range(3)],
            (2, "stderr", "unfinished"),
        ]


def test_gradtui_listen_refuses_a_path_it_cannot_record_to(tmp_path):
    import gradtui

    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n", encoding="utf-8")
    for bad, why in [(notes, "not a gradtui recording"), (notes / "run.db", "cannot create")]:
        with pytest.raises(ValueError, match=why):
            gradtui.listen(record=str(bad))
    with pytest.raises(ValueError, match="need record=PATH"):
        gradtui.listen(flight=5)
    assert notes.read_text(encoding="utf-8") == "mine\n"
