"""Every helper the tests share that starts a whole process, in one module (the in-process ones
are tests/helpers.py; the fixtures are in tests/conftest.py):

- Processes seen from outside: `gone`, `children`, `descendants`, `rss`.
- gradtui run as a command: `gradtui` (`python -m gradtui ARGS`, or another launcher),
  `record_with_fingerprints`, `flight_recording` (the record tests' shared recording, made once).
- Agents: `run_child` (a child agent driven from the test), `Listening` (`gradtui --listen` in a
  subprocess), `remote_target` (a UI's target for it), `RawClient` (a client on a raw socket).
- Runs ended by a signal: `run_signalled`, `wait_ready`, and `plain_exit_status` (how `python
  script.py` ends for each of `EXIT_CASES`: the oracle).
- torchrun jobs of 2 gloo ranks: `torchrun`, `Job`, `JobClient` (a client of the job's hub).
- Terminals: `Terminal` (the journey tests' tmux pane, under a shell that records the tty's modes),
  `Tmux` (a tmux pane that is the app itself), and what was written to them (`plain_text`,
  `private_modes`).
- The browser: `Chromium` (headless, over the DevTools protocol) and its `Page`.

Every wait has a timeout (`PROCESS_TIMEOUT` for a whole run), and every helper that starts a
process has a way to end it (`close`, `end`, `kill`) that the tests call, so none outlives its test.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import os
import queue
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gradtui.clients.feeder import CommandFeeder
from gradtui.protocol import events as ev
from gradtui.protocol.commands import Command, parse
from gradtui.protocol.dist_events import RanksChanged
from gradtui.protocol.options import RunOptions
from gradtui.wire import frames, protocol
from gradtui.wire.child import ChildTarget
from gradtui.wire.client import RemoteTarget
from gradtui.wire.passgraphs import GraphsRead
from gradtui.wire.runtime import running_agents
from tests.helpers import REPO, script

if TYPE_CHECKING:
    import aiohttp

PROCESS_TIMEOUT = 90.0
"""Seconds a whole gradtui process may take to run, or to reach its first pause or its listening
address (torch's import on a loaded machine is most of it): a run, a child agent, a torchrun job,
a terminal's app."""


# Processes seen from outside -------------------------------------------------------------------


def gone(pid: int) -> bool:
    """Has process `pid` ended? A zombie counts as ended: it runs nothing (an orphan's may wait
    for an init that does not reap in a container)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):  # it ended while /proc was read
        return True


def children(pid: int, pattern: str | None = None) -> list[int]:
    """The pids of `pid`'s live children (whose command line matches `pattern`)."""
    args = ["pgrep", "-P", str(pid)] + (["-f", pattern] if pattern else [])
    out = subprocess.run(args, capture_output=True, text=True, timeout=10).stdout
    return [int(p) for p in out.split()]


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, children first (one pass over /proc: a torchrun job's ranks,
    each in a session of its own, found before torchrun is killed and they are orphaned)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def rss(pid: int) -> int:
    """The resident memory of process `pid`, in bytes."""
    with open(f"/proc/{pid}/status") as f:
        line = next(line for line in f if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


# gradtui run as a command -----------------------------------------------------------------------


def gradtui(
    *args: str,
    launcher: list[str] | None = None,
    cwd: str | Path = REPO,
    timeout: float = PROCESS_TIMEOUT,
    **kwargs: Any,
) -> subprocess.CompletedProcess:
    """`python -m gradtui ARGS` (or `launcher ARGS`: the console script) from the repository, its
    output captured; stdin is empty unless `kwargs` give it (`input=`)."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if "input" not in kwargs:
        kwargs.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run(
        [*(launcher or [sys.executable, "-m", "gradtui"]), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
        **kwargs,
    )


def record_with_fingerprints(path: str, script_path: str, *args: str) -> str:
    """`script_path ARGS` recorded to `path` headless with fingerprints, every pass per node
    (what `gradtui diff` and `--against` compare); the path, once the run succeeded."""
    run = gradtui(
        "--headless", "--record-all", "-c", "continue", "--record", path, "--fingerprints", script_path, *args
    )
    assert run.returncode == 0, run.stderr
    return path


@dataclass(frozen=True)
class Made:
    """A recording and the run that made it."""

    path: str
    run: subprocess.CompletedProcess


_recordings = tempfile.TemporaryDirectory(prefix="gradtui-recordings-")  # removed when the test process ends


@functools.cache
def flight_recording() -> Made:
    """The flight recorder's reference run, made on first use (once per test process) and shared
    by the record tests: nan_at_30.py under `gradtui --headless --flight 5 -c 'break nan'
    -c continue --record run.db`, so passes 26-30 have per-node data and the run stopped in pass
    30 after the SqrtBackward0 whose backward divides by zero. Every test that reads it only
    reads it (replays open it read-only; copies are made for edits)."""
    path = os.path.join(_recordings.name, "flight.db")
    run = gradtui(
        "--headless", "--flight", "5", "-c", "break nan", "-c", "continue", "--record", path, script("nan_at_30.py")
    )
    return Made(path, run)


# Agents -----------------------------------------------------------------------------------------


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
            return await asyncio.wait_for(_drive(target, list(commands)), PROCESS_TIMEOUT)
        finally:
            target.kill_now()

    return asyncio.run(main()), target


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

    def wait_listening(self, timeout: float = PROCESS_TIMEOUT) -> str:
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

    def wait_stdout(self, text: bytes, timeout: float = PROCESS_TIMEOUT) -> None:
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

    def attach(self, *args: str, timeout: float = PROCESS_TIMEOUT) -> subprocess.CompletedProcess:
        """`gradtui attach ARGS` in a subprocess, with this agent's runtime folder."""
        return subprocess.run(
            [sys.executable, "-m", "gradtui", "attach", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def wait(self, timeout: float = PROCESS_TIMEOUT) -> int:
        return self.process.wait(timeout)

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def remote_target(agent: Listening) -> RemoteTarget:
    """What `gradtui attach` would connect a UI with to `agent` (its runtime file's token and address)."""
    found = next(a for a in running_agents() if a.address == agent.address)
    return RemoteTarget(
        found.token,
        address=(found.address.rsplit(":", 1)[0], int(found.address.rsplit(":", 1)[1])),
        script=found.script,
    )


class RawClient:
    """A client with the token on a raw socket: every event it is sent, kept (for the tests that
    crowd an agent with strangers or stall it)."""

    def __init__(self, address: str, token: str, deadline: float) -> None:
        host, port = address.rsplit(":", 1)
        self.deadline = deadline
        self.events: list[ev.Event] = []
        while True:  # the agent may still be finishing the strangers' hellos: "busy, try again"
            self.sock = socket.create_connection((host, int(port)), timeout=self.left())
            self.sock.settimeout(self.left())
            hello = protocol.read_frame(self.sock)
            if hello is not None and "hello" in hello:
                break
            self.sock.close()
            assert hello is not None and hello.get("code") == "busy", hello
            time.sleep(0.1)
        self.sock.sendall(protocol.encode({"auth": token, "version": protocol.VERSION}))
        answer = protocol.read_frame(self.sock)
        assert answer is not None and "welcome" in answer, answer

    @functools.cached_property
    def graphs(self) -> GraphsRead:
        """This connection's reader of passes' graphs (one may refer to the pass before)."""
        return GraphsRead()

    def left(self) -> float:
        left = self.deadline - time.monotonic()
        assert left > 0, "the client with the token did not get through in time"
        return left

    def until(self, kind: type, count: int = 1) -> ev.Event:
        """Read events until the `count`-th of `kind` has come."""
        while len([e for e in self.events if isinstance(e, kind)]) < count:
            self.sock.settimeout(self.left())
            message = protocol.read_frame(self.sock)
            assert message is not None and "bye" not in message, message
            self.events.extend(self.graphs.from_wire(e) for e in message.get("events") or ())
        return [e for e in self.events if isinstance(e, kind)][count - 1]

    def send(self, frame: frames.ClientFrame) -> None:
        """Send one typed client frame."""
        self.sock.sendall(frames.encode(frame))

    def submit(self, line: str, request: int) -> None:
        """Send `line`, parsed here as a client parses it."""
        self.send(frames.Submit.of(parse(line), request))


# Runs ended by a signal (python is the oracle of how they end) --------------------------------


EXIT_CASES = {
    "SIGINT": (signal.SIGINT, "sleeps.py"),
    "SIGTERM": (signal.SIGTERM, "sleeps.py"),
    "SIGHUP": (signal.SIGHUP, "sleeps.py"),
    "KeyboardInterrupt": (None, "hook_interrupts.py"),
}
"""What ends the run (a signal sent once the script printed `ready`, or nothing: the script
raises) and the script it ends."""


_plain_exits: dict[str, int] = {}


def wait_ready(process: subprocess.Popen, timeout: float = PROCESS_TIMEOUT) -> None:
    """Read the process's stdout until the script's `ready` line."""
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if "ready" in line:
            return
        if not line and process.poll() is not None:
            raise AssertionError(f"ended before it was ready: {process.returncode}")
    raise AssertionError("never ready")


def run_signalled(
    command: list[str], signum: int | None, env: dict[str, str] | None = None, at_ready=lambda: None
) -> int:
    """Start `command`; once it is ready, call `at_ready()`, then send `signum` (None: none, the script
    ends by itself); its returncode."""
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        wait_ready(process)
        at_ready()
        if signum is not None:
            process.send_signal(signum)
        process.stdout.read()  # type: ignore[union-attr]
        return process.wait(PROCESS_TIMEOUT)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
        process.stdout.close()  # type: ignore[union-attr]


def plain_exit_status(case: str) -> int:
    """`python script.py` ended by `case`: the oracle (once per case)."""
    if case not in _plain_exits:
        signum, name = EXIT_CASES[case]
        _plain_exits[case] = run_signalled([sys.executable, script(name)], signum)
    return _plain_exits[case]


# torchrun jobs ---------------------------------------------------------------------------------

JOB_EVENT_TIMEOUT = 30.0
"""Seconds to wait for the next event from a torchrun job's agent (a rank may wait on a collective)."""


def torchrun(*args: str) -> list[str]:
    """The torchrun command line for 2 local ranks."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]


class Job:
    """A torchrun job started by a test (in its own process group)."""

    def __init__(self, argv: list[str], runtime: Path) -> None:
        env = {**os.environ, "GRADTUI_RUNTIME_DIR": str(runtime), "OMP_NUM_THREADS": "1"}
        runtime.mkdir(mode=0o700, exist_ok=True)
        self.runtime = runtime
        self.log = runtime / "job.log"
        self._out = open(self.log, "wb")
        self.proc = subprocess.Popen(argv, env=env, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True)

    def agent(self, timeout: float = PROCESS_TIMEOUT) -> dict[str, Any]:
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


class JobClient:
    """A plain-socket client of a torchrun job's agent (its hub): events on a queue, commands in."""

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
        graphs = GraphsRead()  # this connection's: a pass may be sent as a reference to the last
        try:
            while (message := protocol.read_frame(self.sock)) is not None:
                if "bye" in message:
                    break
                for data in message.get("events") or ():
                    self.events.put(graphs.from_wire(data))
        except (OSError, protocol.ProtocolError):
            pass
        self.events.put(None)

    def submit(self, command: Command) -> int:
        self._ids += 1
        self.sock.sendall(frames.encode(frames.Submit.of(command, self._ids)))
        return self._ids

    def next(self, match: Callable[[ev.Event], bool], timeout: float = JOB_EVENT_TIMEOUT) -> ev.Event:
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

    def ask(self, text: str, timeout: float = JOB_EVENT_TIMEOUT) -> ev.CommandResult:
        """Submit `text`, parsed here as a client parses it, and wait for its answer."""
        request = self.submit(parse(text))
        return self.next(lambda e: isinstance(e, ev.CommandResult) and e.request == request, timeout)  # type: ignore[return-value]

    def paused(self, timeout: float = JOB_EVENT_TIMEOUT) -> ev.Paused:
        return self.next(lambda e: isinstance(e, ev.Paused), timeout)  # type: ignore[return-value]

    def ranks_where(self, check: Callable[[RanksChanged], bool], timeout: float = JOB_EVENT_TIMEOUT) -> RanksChanged:
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


# Terminals -------------------------------------------------------------------------------------

TERMINAL_SIZES = ((80, 24), (160, 45))
"""The terminals a person meets: a laptop split or an SSH window, and a full screen."""

EXIT_MARK = "journey-exit="
"""What the pane's shell prints after gradtui, before its status."""

FOREIGN = (
    "Traceback",
    "Task was destroyed",
    "Exception ignored",
    "ValueError",
    "RuntimeError",
    "Error in sys.excepthook",
    "was never awaited",
    "press ctrl+q",
)
"""Words that are not gradtui's own: Python's and asyncio's complaints, Textual's hints. Looked
for in everything the terminal was sent, the UI's panes too: a journey's script prints none."""

_ESCAPES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|P[^\x1b]*\x1b\\|[@-Z\\-_])")
_PRIVATE_MODES = re.compile(r"\x1b\[\?([0-9;]+)([hl])")

MODES_OFF = {
    "1049": "the alternate screen",
    "1047": "the alternate screen",
    "1000": "mouse reporting",
    "1002": "mouse drag reporting",
    "1003": "mouse motion reporting",
    "1006": "SGR mouse",
    "1015": "urxvt mouse",
    "1004": "focus events",
    "2004": "bracketed paste",
}
"""DEC private modes a TUI sets and must reset on leaving (mode: what it is)."""

_SERVERS = itertools.count()


def gradtui_command() -> list[str]:
    """`gradtui` as installed beside this Python (the console script a person types), else
    `python -m gradtui`."""
    script = Path(sys.executable).with_name("gradtui")
    return [str(script)] if script.exists() else [sys.executable, "-m", "gradtui"]


def plain_text(raw: str) -> str:
    """The log with every escape sequence removed: the words that reached the terminal."""
    return _ESCAPES.sub("", raw).replace("\r", "")


def private_modes(raw: str) -> dict[str, bool]:
    """Each DEC private mode's last setting in the log (True: set)."""
    modes: dict[str, bool] = {}
    for numbers, action in _PRIVATE_MODES.findall(raw):
        for number in numbers.split(";"):
            modes[number] = action == "h"
    return modes


class Terminal:
    """One tmux pane of `width` x `height` running `command` (a list of words) under `sh`, for
    the journey tests: a real terminal, as a person runs gradtui (the console script,
    TERM=xterm-256color, no COLUMNS/LINES).

    Everything the pane's programs write is copied to a log (`tmux pipe-pane`), so a test sees
    what reached the terminal even after the alternate screen was left, and tmux itself says what
    state the terminal was left in (alternate screen, cursor, mouse modes); the shell records the
    tty's modes (`stty -g`) before and after gradtui and prints its exit status. `close` kills
    the private server and any process of ours still alive."""

    def __init__(
        self, command: list[str], folder: Path, width: int, height: int, env: dict[str, str] | None = None
    ) -> None:
        self.folder = folder
        self.width, self.height = width, height
        self.socket = f"gradtui-journey-{os.getpid()}-{next(_SERVERS)}"
        self.log = folder / "terminal.log"
        self.before, self.after = folder / "stty.before", folder / "stty.after"
        go = folder / "go"
        # The shell waits (bounded) until the log is piped, so nothing the terminal shows is missed.
        line = (
            f"i=0; while [ ! -e {shlex.quote(str(go))} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; "
            f"stty -g > {shlex.quote(str(self.before))}; {shlex.join(command)}; "
            f"echo {EXIT_MARK}$?; stty -g > {shlex.quote(str(self.after))}; sleep 600"
        )
        variables = {"TERM": "xterm-256color", **(env or {})}
        words = ["env", "-u", "COLUMNS", "-u", "LINES", *(f"{k}={v}" for k, v in variables.items()), "sh", "-c", line]
        self._tmux("new-session", "-d", "-s", "j", "-x", str(width), "-y", str(height), *words)
        self.shell = int(self._tmux("list-panes", "-t", "j", "-F", "#{pane_pid}").stdout.split()[0])
        self.socket_path = self._tmux("display-message", "-p", "#{socket_path}").stdout.strip()
        """The server's socket file, which tmux leaves behind when killed."""
        self._tmux("pipe-pane", "-o", "-t", "j", f"cat >> {shlex.quote(str(self.log))}")
        go.touch()
        self.pids: set[int] = {self.shell}
        """Every process seen below the pane, SIGKILLed at `close` if still alive."""

    def _tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10, check=check
        )

    def screen(self) -> str:
        """What the pane shows now."""
        return self._tmux("capture-pane", "-p", "-t", "j", check=False).stdout

    def keys(self, *keys: str) -> None:
        """Press keys (tmux key names: `q`, `C-q`, `Enter`)."""
        self.pids.update(descendants(self.shell))
        self._tmux("send-keys", "-t", "j", *keys)

    def text(self, text: str) -> None:
        """Type literal text."""
        self._tmux("send-keys", "-t", "j", "-l", text)

    def wait(self, predicate: Callable[[str], object], what: str, timeout: float = 30) -> str:
        """Poll the screen until `predicate(screen)`; fail with the last screen after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if predicate(screen):
                self.pids.update(descendants(self.shell))
                return screen
            if time.monotonic() > deadline:
                pytest.fail(
                    f"timed out after {timeout}s waiting for {what}; the screen:\n{screen}"
                    f"\nthe terminal's words:\n{self.words()[-3000:]}"
                )
            time.sleep(0.1)

    def raw(self) -> str:
        """Everything written to the terminal so far, escape sequences and all."""
        return self.log.read_bytes().decode("utf-8", "replace") if self.log.exists() else ""

    def words(self) -> str:
        """Everything written to the terminal so far, without escape sequences."""
        return plain_text(self.raw())

    def exit_status(self, timeout: float = 30) -> int:
        """gradtui's exit status, once the pane's shell has printed it (and `stty -g` after)."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(re.escape(EXIT_MARK) + r"(\d+)", self.words())
            if found and self.after.exists() and self.after.stat().st_size:
                return int(found.group(1))
            if time.monotonic() > deadline:
                pytest.fail(f"gradtui did not end within {timeout}s; the screen:\n{self.screen()}")
            time.sleep(0.1)

    def flag(self, name: str) -> str:
        """One of tmux's format variables for the pane (its terminal's state as tmux sees it)."""
        return self._tmux("display-message", "-p", "-t", "j", f"#{{{name}}}").stdout.strip()

    def assert_clean_exit(self, status: int, own_words: Callable[[str], bool] = lambda line: False) -> str:
        """gradtui ended with `status`; nothing but its own words reached the terminal after it
        left the alternate screen (each paragraph there gradtui's, or one `own_words` accepts),
        none of FOREIGN anywhere; and the terminal is as it found it. Returns the words printed
        on the main screen."""
        got = self.exit_status()
        raw, words = self.raw(), self.words()
        for foreign in FOREIGN:
            assert foreign not in words, f"{foreign!r} reached the terminal:\n{words[-4000:]}"
        assert got == status, f"exit status {got}, not {status}:\n{words[-3000:]}"
        # What the main screen got: everything after the last time the alternate screen was left.
        left = max(raw.rfind("\x1b[?1049l"), 0)
        after = plain_text(raw[left:]).split(EXIT_MARK)[0]
        # Each paragraph (a message wrapped at the terminal's width is one) is gradtui's.
        for paragraph in re.split(r"\n\s*\n", after):
            text = " ".join(paragraph.split())
            assert not text or text.startswith("gradtui") or own_words(text), (
                f"not gradtui's words on the terminal: {text!r}\n{after}"
            )
        # The terminal as it was: tty modes, and every mode the app set reset (tmux's view, and the log's).
        assert self.before.read_text() == self.after.read_text(), "the tty's modes changed (stty -g)"
        assert self.flag("alternate_on") == "0", "the alternate screen was left on"
        assert self.flag("cursor_flag") == "1", "the cursor was left hidden"
        assert self.flag("mouse_any_flag") == "0", "mouse reporting was left on"
        modes = private_modes(raw)
        assert modes.get("25", True), "the cursor was left hidden (no ESC[?25h after the last ESC[?25l)"
        for mode, what in MODES_OFF.items():
            assert not modes.get(mode, False), f"{what} (mode {mode}) was left on"
        return after

    def server_pid(self) -> int:
        """The pid of the pane's private tmux server (stopping it freezes the terminal)."""
        return int(self._tmux("display-message", "-p", "#{pid}").stdout.strip())

    def close_pane(self) -> None:
        """Close the pane as a terminal window is closed: tmux hangs it up (SIGHUP to what runs
        in it) and the terminal is gone."""
        self.pids.update(descendants(self.shell))
        self._tmux("kill-pane", "-t", "j", check=False)

    def close(self) -> None:
        """Kill the private tmux server (and remove its socket file), then every process of ours
        that outlived it."""
        self.pids.update(descendants(self.shell))
        self._tmux("kill-server", check=False)
        if self.socket_path:
            Path(self.socket_path).unlink(missing_ok=True)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not all(gone(pid) for pid in self.pids):
            time.sleep(0.05)
        for pid in self.pids:
            if not gone(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


class Tmux:
    """One detached tmux session on a private server socket whose pane is the app itself (it
    ends with the app: `alive`), for the UI tests that drive the real `gradtui` by keys; `kill`
    ends it. (The journey tests' `Terminal` runs gradtui under a shell that records the tty.)"""

    def __init__(self, command: list[str], width: int = 80, height: int = 24) -> None:
        self.socket = f"gradtui-test-{os.getpid()}"
        env = dict(os.environ, TERM="xterm-256color", PYTHONPATH=str(REPO))
        self._tmux(
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            str(width),
            "-y",
            str(height),
            "env",
            f"PYTHONPATH={REPO}",
            "TERM=xterm-256color",
            *command,
            env=env,
        )
        self.pid = int(self._tmux("list-panes", "-t", "t", "-F", "#{pane_pid}").stdout.split()[0])
        """The pane's process: the app (`env` execs it)."""

    def _tmux(self, *args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10, env=env, check=check
        )

    def screen(self) -> str:
        """What the pane shows now."""
        return self._tmux("capture-pane", "-p", "-t", "t").stdout

    def keys(self, *keys: str) -> None:
        """Type keys (tmux key names, or literal text with `-l`)."""
        self._tmux("send-keys", "-t", "t", *keys)

    def text(self, text: str) -> None:
        """Type literal text."""
        self._tmux("send-keys", "-t", "t", "-l", text)

    def wait(self, predicate, timeout: float = 20, what: str = "") -> str:
        """Poll the screen until `predicate(screen)`; fail with the last screen after `timeout`."""
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            try:
                screen = self.screen()
            except subprocess.CalledProcessError:
                screen = ""
            if predicate(screen):
                return screen
            time.sleep(0.1)
        pytest.fail(f"timed out after {timeout}s waiting for {what}; the screen:\n{screen}")

    def alive(self) -> bool:
        """Is the session (the app) still running?"""
        return self._tmux("has-session", "-t", "t", check=False).returncode == 0

    def kill(self) -> None:
        """End the tmux server, then the app if it outlived its terminal's hangup (its agent
        dies with it: PR_SET_PDEATHSIG)."""
        self._tmux("kill-server", check=False)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and os.path.exists(f"/proc/{self.pid}"):
            time.sleep(0.05)
        if os.path.exists(f"/proc/{self.pid}"):
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# The browser -----------------------------------------------------------------------------------

CDP_TIMEOUT = 30.0
"""Seconds one CDP command may take (a first navigation on a loaded machine is the slowest)."""

SCREEN_HOOK = """
Object.defineProperty(Object.prototype, "terminal", {
  configurable: true,
  set(value) {
    Object.defineProperty(this, "terminal", {value, writable: true, configurable: true, enumerable: true});
    if (value && typeof value === "object" && "buffer" in value && !window.__gradtuiTerminal) {
      window.__gradtuiTerminal = value;
    }
  },
});
"""

SCREEN_TEXT = """(() => {
  const t = window.__gradtuiTerminal;
  if (!t) return "";
  const rows = [];
  for (let i = 0; i < t.rows; i++) {
    const line = t.buffer.active.getLine(i);
    rows.push(line ? line.translateToString(true) : "");
  }
  return rows.join("\\n");
})()"""

TERMINAL_SIZE = "(() => { const t = window.__gradtuiTerminal; return t ? [t.cols, t.rows] : null; })()"
"""The page's terminal size in cells, as xterm.js fitted it to the window."""

CONNECT_AT = """
(() => {  /* the websocket's URL says WIDTHxHEIGHT, whatever the page measured */
  const Real = window.WebSocket;
  window.WebSocket = class extends Real {
    constructor(url, protocols) {
      const u = new URL(url, location.href);
      if (u.searchParams.has("width")) { u.searchParams.set("width", "%d"); u.searchParams.set("height", "%d"); }
      super(u.toString(), protocols);
    }
  };
})();
"""
"""A script that makes the page open its websocket saying another size than the page's: as when
the page measures its terminal again once the websocket opens (a font loaded in between), the
tab process then starts at one size and gets the page's own a moment later, during its start."""


def chromium_path() -> str | None:
    """The Chromium binary (Debian's `chromium` package), or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    """A headless Chromium with a private profile; `close` kills it and removes the profile.

    It starts Debian's `chromium --headless` with `--remote-debugging-port=0` and reads the port
    it picked from its stderr (`devtools_port`); `Page.open` connects to its first tab's websocket
    with aiohttp (a dependency of textual-serve already, imported only there).
    """

    def __init__(self, binary: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="gradtui-chromium-")
        self.process = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--window-size=1280,900",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self._err = b""

    def devtools_port(self, timeout: float) -> int:
        """The port Chromium's DevTools listen on (it says so on stderr)."""
        assert self.process.stderr is not None
        os.set_blocking(self.process.stderr.fileno(), False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            chunk = self.process.stderr.read()
            if chunk:
                self._err += chunk
            found = re.search(rb"DevTools listening on ws://[^:]+:(\d+)/", self._err)
            if found:
                return int(found.group(1))
            if self.process.poll() is not None:
                raise AssertionError(f"chromium exited {self.process.returncode}: {self._err.decode(errors='replace')}")
            time.sleep(0.05)
        raise AssertionError(
            f"chromium did not open its DevTools port in {timeout}s: {self._err.decode(errors='replace')}"
        )

    def close(self) -> None:
        """Kill Chromium (its whole process group: renderers, GPU process) and drop the profile."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(10)
        if self.process.stderr is not None:
            self.process.stderr.close()
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    """One tab over CDP: `call` a method and get its result, every wait with a timeout.

    Reading what the page shows: textual-serve's terminal is xterm.js drawing on a canvas, so the
    screen's text is not in the DOM. Before the page's scripts run, `SCREEN_HOOK` puts a setter
    for `terminal` on Object.prototype: textual.js's `this.terminal = new Terminal(...)` goes
    through it, which leaves the property as it would have been and keeps the xterm Terminal in
    `window.__gradtuiTerminal`; `screen()` reads its rows with xterm's public buffer API.
    """

    def __init__(self, session: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._session = session
        self._ws = ws
        self._ids = itertools.count(1)

    @classmethod
    async def open(cls, port: int) -> Page:
        """Connect to the browser's first page."""
        import aiohttp

        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=CDP_TIMEOUT))
        try:
            async with session.get(f"http://127.0.0.1:{port}/json/list") as answer:
                targets = await answer.json(content_type=None)
            url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
            ws = await session.ws_connect(url, max_msg_size=1 << 26)
        except BaseException:
            await session.close()
            raise
        return cls(session, ws)

    async def call(self, method: str, **params: Any) -> dict:
        """Send a CDP command; its result (AssertionError on a CDP error)."""
        request = next(self._ids)
        await self._ws.send_str(json.dumps({"id": request, "method": method, "params": params}))

        import aiohttp

        async def answer() -> dict:
            while True:
                message = await self._ws.receive()
                if message.type != aiohttp.WSMsgType.TEXT:
                    raise AssertionError(f"the DevTools connection ended during {method}: {message.type}")
                data = json.loads(message.data)
                if data.get("id") == request:
                    if "error" in data:
                        raise AssertionError(f"{method}: {data['error']}")
                    return data.get("result", {})

        return await asyncio.wait_for(answer(), CDP_TIMEOUT)

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def screen(self) -> str:
        """The text of the page's terminal, row by row."""
        return await self.evaluate(SCREEN_TEXT) or ""

    async def terminal_size(self) -> tuple[int, int]:
        """The page's terminal size (columns, rows), once the terminal exists."""
        size = await self.evaluate(TERMINAL_SIZE)
        assert size, "the page has no terminal"
        return size[0], size[1]

    async def wait_screen(self, pattern: str, timeout: float) -> re.Match:
        """Poll the terminal until `pattern` is on it; its match."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = await self.screen()
            found = re.search(pattern, text)
            if found:
                return found
            await asyncio.sleep(0.1)
        raise AssertionError(f"{pattern!r} did not appear on the page in {timeout}s; it shows:\n{text}")

    async def press(self, key: str) -> None:
        """A key press (down, char, up) sent to the focused element: the terminal's textarea."""
        await self.call(
            "Input.dispatchKeyEvent",
            type="keyDown",
            key=key,
            text=key,
            unmodifiedText=key,
            code=f"Key{key.upper()}",
            windowsVirtualKeyCode=ord(key.upper()),
        )
        await self.call(
            "Input.dispatchKeyEvent",
            type="keyUp",
            key=key,
            code=f"Key{key.upper()}",
            windowsVirtualKeyCode=ord(key.upper()),
        )

    async def close(self) -> None:
        """Close the DevTools connection."""
        await self._ws.close()
        await self._session.close()
