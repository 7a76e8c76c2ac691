"""Helpers for tests/distributed: a torchrun job of 2 gloo ranks under gradtui, and a client of its hub.

Every wait has a timeout; the job runs in its own process group, which `Job.end` kills (the
fixtures call it in a finalizer), so no rank outlives its test.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from gradtui.protocol import events as ev
from gradtui.protocol.commands import Command, parse
from gradtui.protocol.dist_events import RanksChanged
from gradtui.wire import frames, protocol
from gradtui.wire.codec import from_wire
from tests.procs import descendants

HERE = Path(__file__).resolve().parent
START_TIMEOUT = 90.0
EVENT_TIMEOUT = 30.0


def torchrun(*args: str) -> list[str]:
    """The torchrun command line for 2 local ranks."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]


class QuietSession:
    """The session a RankLink or JobHub unit test gives them: never quitting or paused, no
    breakpoints, its events dropped."""

    quitting = False
    paused = False
    breakpoints = ()

    def emit(self, event: ev.Event) -> None:
        """Drop the event."""


class Job:
    """A torchrun job started by a test (in its own process group)."""

    def __init__(self, argv: list[str], runtime: Path) -> None:
        env = {**os.environ, "GRADTUI_RUNTIME_DIR": str(runtime), "OMP_NUM_THREADS": "1"}
        runtime.mkdir(mode=0o700, exist_ok=True)
        self.runtime = runtime
        self.log = runtime / "job.log"
        self._out = open(self.log, "wb")
        self.proc = subprocess.Popen(argv, env=env, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True)

    def agent(self, timeout: float = START_TIMEOUT) -> dict[str, Any]:
        """The one runtime file of the job (rank 0's agent), once it is written."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            files = [f for f in self.runtime.glob("agent-*.json")]
            if files:
                assert len(files) == 1, f"the job must have one address, found {files}"
                try:
                    return json.loads(files[0].read_text())
                except ValueError:
                    pass
            assert self.proc.poll() is None, self.output()
            time.sleep(0.05)
        raise AssertionError(f"no agent after {timeout} s:\n{self.output()}")

    def wait(self, timeout: float = 60.0) -> int:
        """torchrun's exit status; a job still running after `timeout` fails the test with its output."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the job still runs after {timeout} s:\n{self.output()}") from None

    def output(self) -> str:
        self._out.flush()
        return self.log.read_text(errors="replace")

    def end(self) -> None:
        """Kill the whole job (torchrun and its ranks) if it still runs. torchrun starts each rank
        in a session of its own, so they are found as its descendants first (once it is killed
        they are orphans)."""
        ranks = descendants(self.proc.pid)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in ranks:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        self._out.close()


class Client:
    """A plain-socket client of the job's agent: events on a queue, commands in."""

    def __init__(self, address: str, token: str, timeout: float = 10.0) -> None:
        """Attach; while the agent still serves the client before this one (it detached a moment
        ago), try again, for up to `timeout` seconds."""
        host, _, port = address.rpartition(":")
        deadline = time.monotonic() + timeout
        while True:
            self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=protocol.HELLO_TIMEOUT)
            protocol.check_hello(protocol.read_frame(self.sock))
            self.sock.sendall(protocol.encode({"auth": token, "version": protocol.VERSION}))
            answer = protocol.read_frame(self.sock)
            if answer is not None and "another client" in str(answer.get("refused")) and time.monotonic() < deadline:
                self.sock.close()
                time.sleep(0.05)
                continue
            assert answer is not None and "welcome" in answer, answer
            break
        self.sock.settimeout(None)
        self.events: queue.Queue[ev.Event | None] = queue.Queue()
        self.seen: list[ev.Event] = []
        self.ranks: RanksChanged | None = None
        self._ids = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            while (message := protocol.read_frame(self.sock)) is not None:
                if "bye" in message:
                    break
                for data in message.get("events") or ():
                    self.events.put(from_wire(data))
        except (OSError, protocol.ProtocolError):
            pass
        self.events.put(None)

    def submit(self, command: Command) -> int:
        self._ids += 1
        self.sock.sendall(frames.encode(frames.Submit.of(command, self._ids)))
        return self._ids

    def next(self, match: Callable[[ev.Event], bool], timeout: float = EVENT_TIMEOUT) -> ev.Event:
        """The next event that `match`es (the ones before it are kept in `seen`)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"timed out waiting; last events: {self.seen[-8:]}"
            try:
                event = self.events.get(timeout=left)
            except queue.Empty:
                continue
            assert event is not None, f"the agent went away; last events: {self.seen[-8:]}"
            self.seen.append(event)
            if isinstance(event, RanksChanged):
                self.ranks = event
            if match(event):
                return event

    def ask(self, text: str, timeout: float = EVENT_TIMEOUT) -> ev.CommandResult:
        """Submit `text`, parsed here as a client parses it, and wait for its answer."""
        request = self.submit(parse(text))
        return self.next(lambda e: isinstance(e, ev.CommandResult) and e.request == request, timeout)  # type: ignore[return-value]

    def paused(self, timeout: float = EVENT_TIMEOUT) -> ev.Paused:
        return self.next(lambda e: isinstance(e, ev.Paused), timeout)  # type: ignore[return-value]

    def ranks_where(self, check: Callable[[RanksChanged], bool], timeout: float = EVENT_TIMEOUT) -> RanksChanged:
        """Wait until the rank strip's data satisfies `check`."""
        if self.ranks is not None and check(self.ranks):
            return self.ranks
        return self.next(lambda e: isinstance(e, RanksChanged) and check(e), timeout)  # type: ignore[return-value]

    def drain(self, timeout: float = 60.0) -> None:
        """Read until the agent goes away."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if event is None:
                return
            self.seen.append(event)
        raise AssertionError("the agent did not end")

    def close(self) -> None:
        """Detach: shut the socket down first (a close alone, while the reader thread is in recv,
        sends the agent nothing)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass


def grads(folder: Path, step: int, rank: int) -> dict[str, torch.Tensor]:
    """The gradients the test script saved for (step, rank)."""
    return torch.load(folder / f"grads{step}-{rank}.pt")


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Exactly equal, NaN where NaN (DTensor local shards compared as they are)."""
    a, b = getattr(a, "to_local", lambda: a)(), getattr(b, "to_local", lambda: b)()
    return a.shape == b.shape and bool(
        torch.equal(torch.nan_to_num(a, nan=0.125), torch.nan_to_num(b, nan=0.125))
        and torch.equal(a.isnan(), b.isnan())
    )


def assert_same_grads(mine: Path, theirs: Path, steps: tuple[int, ...] = (0, 1)) -> None:
    """Every (step, rank)'s saved gradients in `mine` equal those in `theirs` exactly."""
    for step in steps:
        for rank in (0, 1):
            a, b = grads(mine, step, rank), grads(theirs, step, rank)
            assert a.keys() == b.keys() and all(same(a[k], b[k]) for k in a), (step, rank)
