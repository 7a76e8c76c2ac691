"""A real agent process and a client over the wire: the script owns its process, the client
survives its end, the listening agent refuses what it must."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import stat
import subprocess
import sys
import time

import pytest

from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from gradtui.protocol.options import RunOptions
from gradtui.wire import frames, protocol
from gradtui.wire.child import ChildTarget
from tests.helpers import SCRIPTS, output_of
from tests.processes import PROCESS_TIMEOUT, Listening, run_child

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "wire")


def test_the_script_runs_on_the_main_thread_of_its_own_process_and_fd_output_is_captured():
    events, _ = run_child(os.path.join(HERE, "signals.py"), ["continue"])
    out = output_of(events)
    assert "thread MainThread" in out  # signal.signal worked: it raises anywhere else
    assert "from-a-child" in out  # written by a shell child to fd 1
    assert "grad [3.0, 3.0]" in out
    done = [e for e in events if isinstance(e, ev.ScriptFinished)]
    assert len(done) == 1 and done[0].exit_status == 0 and done[0].how is None


@pytest.mark.parametrize(
    "script, status, how",
    [
        ("exit4.py", 4, "exited with status 4"),
        ("segv.py", 128 + 11, "was killed by SIGSEGV"),
    ],
)
def test_an_agent_that_dies_is_reported_with_how_it_ended_and_its_last_output(script, status, how):
    events, target = run_child(os.path.join(HERE, script), ["continue"])
    done = [e for e in events if isinstance(e, ev.ScriptFinished)]
    assert len(done) == 1, events
    assert done[0].exit_status == status and done[0].how is not None and done[0].how.startswith(how)
    assert "about to" in output_of(events)
    assert target.process is not None and target.process.returncode is not None


def test_listen_then_attach_headless_steps_to_the_gradient_arriving_at_y(tmp_path):
    agent = Listening(SCRIPTS / "chain.py", tmp_path)
    try:
        address = agent.wait_listening()
        assert address.startswith("127.0.0.1:")
        files = list(tmp_path.iterdir())
        assert len(files) == 1 and stat.S_IMODE(files[0].stat().st_mode) == 0o600
        entry = json.loads(files[0].read_text())
        assert entry["address"] == address and entry["pid"] == agent.process.pid and entry["token"]
        done = agent.attach("--headless", "-c", "step", "-c", "print", "-c", "continue")
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        paused = next(i for i, line in enumerate(lines) if line.startswith("paused before #1 MulBackward0 (y)"))
        assert "values [12]" in "\n".join(lines[paused:])
        assert "pass 0 done" in done.stdout and "detached" in done.stdout
        assert agent.wait() == 0
        assert not list(tmp_path.iterdir())  # the runtime file is gone with the agent
    finally:
        agent.close()


def test_a_wrong_token_is_refused_before_any_command_runs(tmp_path):
    agent = Listening(SCRIPTS / "chain.py", tmp_path)
    try:
        address = agent.wait_listening()
        refused = agent.attach(address, "--token", "not-the-token", "--headless", "-c", "continue")
        assert refused.returncode == 2 and "wrong token" in refused.stderr
        host, port = address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            raw.settimeout(10)
            assert protocol.read_frame(raw)["hello"] == "gradtui"
            raw.sendall(frames.encode(frames.Submit.of(parse("continue"), 1)))  # no auth: must not run
            answer = protocol.read_frame(raw)
            assert answer is not None and "refused" in answer
        assert agent.process.poll() is None  # still waiting at its first pause for a real client
        done = agent.attach("--headless", "-c", "continue")
        assert done.returncode == 0 and "paused before #0" in done.stdout
    finally:
        agent.close()


def test_a_second_client_is_refused_while_one_is_attached(tmp_path):
    agent = Listening(SCRIPTS / "chain.py", tmp_path)
    try:
        address = agent.wait_listening()
        token = json.loads(next(tmp_path.iterdir()).read_text())["token"]
        host, port = address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as first:
            first.settimeout(10)
            protocol.read_frame(first)
            first.sendall(protocol.encode({"auth": token, "version": protocol.VERSION}))
            assert "welcome" in protocol.read_frame(first)
            second = agent.attach("--headless", "-c", "continue")
            assert second.returncode == 2 and "another client is attached" in second.stderr
            first.sendall(frames.encode(frames.Quit()))
            # Read on until the agent closes, as a real client does: closing with its events unread
            # would reset the connection, and the reset can beat the quit to the agent.
            deadline = time.monotonic() + 30
            while protocol.read_frame(first, deadline=deadline) is not None:
                pass
        assert agent.wait() == 130
    finally:
        agent.close()


def test_detach_leaves_the_script_running_and_a_breakpoint_waits_for_the_next_client(tmp_path):
    agent = Listening(os.path.join(HERE, "looping.py"), tmp_path)
    try:
        agent.wait_listening()
        first = agent.attach("--headless", "-c", "break pass 150", "-c", "continue")
        assert first.returncode == 0 and "detached" in first.stdout  # commands ran out: detached
        assert agent.process.poll() is None
        second = agent.attach("--headless", "-c", "print", "-c", "delete all", "-c", "continue")
        assert second.returncode == 0, second.stderr
        assert "pass 150" in second.stdout and "breakpoint 1" in second.stdout
        assert agent.wait() == 0
    finally:
        agent.close()


def test_bad_listen_addresses_and_ports_in_use_are_one_line_errors(tmp_path):
    env = {**os.environ, "GRADTUI_RUNTIME_DIR": str(tmp_path)}
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        for address, message in ((f"127.0.0.1:{port}", "cannot listen"), ("nonsense:x", "is not [HOST:]PORT")):
            done = subprocess.run(
                [sys.executable, "-m", "gradtui", "--listen", address, str(SCRIPTS / "chain.py")],
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
            )
            assert done.returncode == 2 and message in done.stderr, done.stderr
            assert len(done.stderr.strip().splitlines()[-1]) < 200
    assert not list(tmp_path.iterdir())


def test_attach_with_no_agent_running_says_how_to_start_one(tmp_path):
    env = {**os.environ, "GRADTUI_RUNTIME_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "gradtui", "attach", "--headless"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 2 and "gradtui --listen" in done.stderr


def test_a_child_agents_token_is_not_in_its_environment_nor_its_command_line(monkeypatch):
    known = "KNOWN-TOKEN-not-in-environ-0123"
    monkeypatch.setattr(secrets, "token_urlsafe", lambda nbytes=None: known)
    target = ChildTarget(RunOptions(str(SCRIPTS / "chain.py"), []))
    seen: dict[str, bytes] = {}
    finished: list[ev.ScriptFinished] = []

    async def drive() -> None:
        try:
            await target.start()
            async for batch in target.batches():
                for event in batch:
                    if isinstance(event, ev.Paused) and not seen:
                        for name in ("environ", "cmdline"):
                            with open(f"/proc/{target.process.pid}/{name}", "rb") as f:
                                seen[name] = f.read()
                        target.submit(parse("continue"))
                    elif isinstance(event, ev.ScriptFinished):
                        finished.append(event)
        finally:
            target.kill_now()

    asyncio.run(asyncio.wait_for(drive(), PROCESS_TIMEOUT))
    assert seen and finished and finished[0].exit_status == 0  # it authenticated with that token
    for name, data in seen.items():
        assert known.encode() not in data and b"GRADTUI_TOKEN=" not in data, name


def test_what_queued_while_the_ui_was_busy_comes_as_one_batch_in_order(tmp_path):
    # A UI that draws once a batch and is handed one queued batch at a time falls behind a fast
    # loop for good (each pass's events and its printed line are batches of their own): here the
    # reader stays away while the script runs 200 passes to its end, then must get all of it at
    # once, the script's end last.
    script = tmp_path / "fast_loop.py"
    script.write_text(
        "import torch\n"
        "w = torch.ones(3, requires_grad=True)\n"
        "for step in range(200):\n"
        "    (w * step).sum().backward()\n"
        "    print('step', step, flush=True)\n"
    )
    target = ChildTarget(RunOptions(str(script), []))
    after_continue: list[list[ev.Event]] = []

    async def drive() -> None:
        try:
            await target.start()
            continued = False
            async for batch in target.batches():
                if continued:
                    after_continue.append(batch)
                elif any(isinstance(e, ev.Paused) for e in batch):
                    target.submit(parse("continue"))
                    continued = True
                    assert target.process is not None
                    await target.process.wait()  # everything it sent is queued by now, nothing read
        finally:
            target.kill_now()

    asyncio.run(asyncio.wait_for(drive(), PROCESS_TIMEOUT))
    events = [e for batch in after_continue for e in batch]
    assert output_of(events).split() == [word for step in range(200) for word in ("step", str(step))]
    assert sum(isinstance(e, ev.PassStarted) for e in events) == 199  # the first began before the pause
    assert isinstance(events[-1], ev.ScriptFinished) and events[-1].exit_status == 0
    assert len(after_continue) <= 3, [len(b) for b in after_continue]  # the run's, the output after it, the end
