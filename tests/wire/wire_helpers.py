"""Helpers of the wire tests: a child agent driven from a test, listening agents in subprocesses."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from gradtui.clients.feeder import CommandFeeder
from gradtui.protocol import events as ev
from gradtui.protocol.options import RunOptions
from gradtui.wire.child import ChildTarget

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "tests" / "fixtures"
TIMEOUT = 90.0
"""Seconds a whole child run may take (torch's import on a busy machine is most of it)."""


async def _drive(target, commands: list[str]) -> list[ev.Event]:
    await target.start()
    feeder = CommandFeeder(commands)
    events: list[ev.Event] = []
    async for batch in target.batches():
        for event in batch:
            events.append(event)
            if not feeder.due(event):
                continue
            while (typed := feeder.pop()) is not None and typed.command is None:
                events.append(
                    ev.CommandResult(typed.text, typed.error or "", ok=False)
                )  # answered here, as a client does
                feeder.skipped()
            if typed is not None and typed.command is not None:
                feeder.sent(target.submit(typed.command))
    return events


def run_child(script: str | Path, commands: list[str] = (), args: list[str] = ()) -> tuple[list[ev.Event], ChildTarget]:
    """Run `script` in a child agent answering its pauses with `commands`; every event, and the target."""
    target = ChildTarget(RunOptions(str(script), list(args)))

    async def main():
        try:
            return await asyncio.wait_for(_drive(target, list(commands)), TIMEOUT)
        finally:
            target.kill_now()

    return asyncio.run(main()), target


def output_of(events: list[ev.Event], stream: str = "stdout") -> str:
    """What the script wrote to one stream."""
    return "".join(e.text for e in events if isinstance(e, ev.Output) and e.stream == stream)


class Listening:
    """`gradtui --listen ADDRESS SCRIPT` in a subprocess; ended (killed if need be) by `close`."""

    def __init__(
        self,
        script: str | Path,
        runtime: Path,
        address: str = "127.0.0.1:0",
        *args: str,
        env: dict[str, str] | None = None,
        preexec_fn=None,
        cwd: str | Path | None = None,
    ) -> None:
        """`env`: variables to set for the agent; `preexec_fn`: run in the agent's process
        before it starts (e.g. to lower a resource limit); `cwd`: its working folder."""
        self.env = {**os.environ, "GRADTUI_RUNTIME_DIR": str(runtime), **(env or {})}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gradtui", "--listen", address, str(script), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=self.env,
            start_new_session=True,
            preexec_fn=preexec_fn,
            cwd=cwd,
        )
        self.address: str | None = None
        self._out = b""
        self._err = b""

    def wait_listening(self, timeout: float = TIMEOUT) -> str:
        """The address the agent says it listens on (its stderr line)."""
        deadline = time.monotonic() + timeout
        assert self.process.stderr is not None
        os.set_blocking(self.process.stderr.fileno(), False)
        while time.monotonic() < deadline:
            chunk = self.process.stderr.read()
            if chunk:
                self._err += chunk
            found = re.search(rb"agent listening on (\S+) ", self._err)
            if found:
                self.address = found.group(1).decode()
                return self.address
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"the agent did not start listening: {self._err.decode(errors='replace')}")

    def wait_stdout(self, text: bytes, timeout: float = TIMEOUT) -> None:
        """Wait until the agent's stdout (the script's, teed) has shown `text`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.output()[0]:
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"the agent never printed {text!r}: {self.output()}")

    def output(self) -> tuple[bytes, bytes]:
        """Everything the agent has written to its stdout and stderr so far (read without waiting)."""
        for stream, name in ((self.process.stdout, "_out"), (self.process.stderr, "_err")):
            assert stream is not None
            os.set_blocking(stream.fileno(), False)
            chunk = stream.read()
            if chunk:
                setattr(self, name, getattr(self, name) + chunk)
        return self._out, self._err

    def attach(self, *args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
        """`gradtui attach ARGS` in a subprocess, with this agent's runtime folder."""
        return subprocess.run(
            [sys.executable, "-m", "gradtui", "attach", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def wait(self, timeout: float = TIMEOUT) -> int:
        return self.process.wait(timeout)

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
