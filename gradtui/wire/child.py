"""`ChildTarget`: start the script in a child agent process and debug it over a socketpair.

The child is `python -m gradtui.agent` with the script on its main thread (so the script owns
its signals, its `os._exit`, its crashes). Its stdout and stderr are pipes this side reads into
`Output` events, so output of C++ code and subprocesses is captured too, and whatever the child
wrote before it died is still read. It runs in a session of its own (no terminal signals reach
it; this side stops it), with stdin from /dev/null, and it is killed with its process group if
it does not quit when asked. If it ends without saying so itself (`os._exit`, a signal), this
side makes the `ScriptFinished` event, with how it ended, and hands it to `untold_end` (the
command line writes it into the run's recording, whose writer died with the child).
"""

from __future__ import annotations

import asyncio
import codecs
import os
import secrets
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable

from gradtui.protocol import events as ev
from gradtui.protocol.commands import Command
from gradtui.protocol.lines import LineSplitter
from gradtui.protocol.options import RunOptions
from gradtui.wire.client import RemoteTarget
from gradtui.wire.target import TargetError, TargetInfo

START_TIMEOUT = 120.0
"""Seconds a starting child has to say hello (importing torch on a busy machine takes a while;
a child that dies first closes the socket, which ends the wait at once)."""

QUIT_WAIT = 1.0
"""Seconds the child has to end after `quit` (write its report, say goodbye) before it is killed."""


def describe_exit(returncode: int) -> str:
    """`exited with status 4`, `was killed by SIGSEGV (Segmentation fault)`: how a process ended."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        sig = signal.Signals(-returncode)
        return f"was killed by {sig.name} ({signal.strsignal(sig) or sig.name})"
    except ValueError:
        return f"was killed by signal {-returncode}"


def _end_of(batch: list[ev.Event]) -> int | None:
    """Where the script's end is in `batch` (None: not in it)."""
    return next((i for i, e in enumerate(batch) if isinstance(e, ev.ScriptFinished)), None)


def _token_pipe(token: str) -> int:
    """The read end of a pipe holding `token` (and then its end): the child reads its token from
    this inherited fd, because an environment variable stays readable in /proc/PID/environ for
    the child's whole life, whatever the child removes from `os.environ`."""
    read, write = os.pipe()
    try:
        os.write(write, token.encode())  # far below a pipe's buffer: never blocks
    finally:
        os.close(write)
    return read


class ChildTarget:
    """The script in a child agent process (see module doc)."""

    def __init__(self, options: RunOptions, untold_end: Callable[[ev.ScriptFinished], None] | None = None) -> None:
        """`untold_end`: called with the end this side made for a child that died without saying how."""
        self.options = options
        self._untold_end = untold_end
        self.environ = dict(os.environ)
        """The script's environment, as the user's shell gave it (the UI then drops COLUMNS/LINES)."""
        self.info = TargetInfo(options.script, (options.script, *options.args))
        self.process: asyncio.subprocess.Process | None = None
        self._remote: RemoteTarget | None = None
        self._queue: asyncio.Queue[list[ev.Event] | None] = asyncio.Queue()
        self._tasks: list[asyncio.Task] = []
        self._finished: ev.ScriptFinished | None = None
        self._last_pass = 0

    async def start(self) -> None:
        """Start the child and connect to it."""
        ours, theirs = socket.socketpair()
        token = secrets.token_urlsafe(24)
        token_fd = _token_pipe(token)
        env = {
            **self.environ,
            **self.options.to_env(),
            "GRADTUI_TOKEN_FD": str(token_fd),
            "GRADTUI_AGENT_FD": str(theirs.fileno()),
        }
        try:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "gradtui.agent",
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                pass_fds=(theirs.fileno(), token_fd),
                start_new_session=True,
            )
        except OSError as exc:
            raise TargetError(f"cannot start the agent: {exc}") from None
        finally:
            theirs.close()
            os.close(token_fd)
        self.info = TargetInfo(self.options.script, (self.options.script, *self.options.args), self.process.pid)
        self._remote = RemoteTarget(token, sock=ours, script=self.options.script, hello_timeout=START_TIMEOUT)
        self._tasks = [
            asyncio.ensure_future(self._read_output(self.process.stdout, "stdout")),
            asyncio.ensure_future(self._read_output(self.process.stderr, "stderr")),
        ]
        try:
            await self._remote.start()
        except TargetError:
            await self._kill()
            raise
        self._tasks.append(asyncio.ensure_future(self._read_wire()))

    @property
    def told_end(self) -> ev.ScriptFinished | None:
        """The script's end as the agent told it, as soon as it reached this side (None before):
        `batches` yields it only after the script's last output is read, when the child's pipes
        close, which a child finalizing an interpreter with torch loaded can take seconds to do."""
        return self._finished

    def submit(self, command: Command) -> int:
        """Send a command to the agent."""
        assert self._remote is not None
        return self._remote.submit(command)

    def show_flow(self, shown: bool) -> None:
        """Tell the agent whether the UI shows every pass's gradient flow now (RemoteTarget.show_flow)."""
        if self._remote is not None:
            self._remote.show_flow(shown)

    def drawn(self, pass_index: int) -> None:
        """Tell the agent the UI has drawn the end of pass `pass_index` (RemoteTarget.drawn)."""
        if self._remote is not None:
            self._remote.drawn(pass_index)

    async def _read_wire(self) -> None:
        assert self._remote is not None
        async for batch in self._remote.batches():
            for event in batch:
                match event:
                    case ev.ScriptFinished():
                        self._finished = event
                    case ev.PassStarted():
                        self._last_pass = event.pass_index + 1
            await self._queue.put(batch)
        await self._queue.put(None)

    async def _read_output(self, stream: asyncio.StreamReader | None, name: str) -> None:
        """The child's pipe, a complete line at a time (a `\\r` progress bar's last state included)."""
        if stream is None:
            return
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        lines = LineSplitter(name)
        while True:
            data = await stream.read(1 << 16)
            if not data:
                break
            if (complete := lines.feed(decoder.decode(data))) is not None:
                await self._queue.put([complete])
        if (rest := lines.end(decoder.decode(b"", final=True))) is not None:
            await self._queue.put([rest])

    async def batches(self) -> AsyncIterator[list[ev.Event]]:
        """Events and output as they come; the script's end only after the last of its output
        (the pipes reach their end when the process has gone); then how it ended."""
        wire_open = True
        held: list[list[ev.Event] | None] = []  # a batch read ahead, not yet yielded (None: the wire's end)
        while wire_open:
            batch = held.pop() if held else await self._queue.get()
            if batch is None:
                break
            end = _end_of(batch)
            if end is None:
                # NOTE: everything queued by now goes as one batch (the UI draws once a batch):
                # read one queued batch at a time, a UI slower than a fast loop's events and
                # output falls behind the script for good, and its pause (a Ctrl-C's) is drawn
                # only once the backlog is read, seconds or minutes late. A batch that ends the
                # script (or the wire's end) is held for the way below, which waits for the
                # last of the output first.
                while not self._queue.empty():
                    more = self._queue.get_nowait()
                    if more is None or _end_of(more) is not None:
                        held.append(more)
                        break
                    batch.extend(more)
                yield batch
                continue
            before = batch[:end]
            await self._output_done()
            while not self._queue.empty():
                more = self._queue.get_nowait()
                if more is None:
                    wire_open = False  # the agent's goodbye came with the last of the output
                else:
                    before.extend(more)
            if before:
                yield before
            yield batch[end:]
        ended = await self._wait_exit()
        await self._output_done()
        rest = [e for batch in self._drain() for e in batch]
        if rest:
            yield rest
        if self._finished is None:
            status = ended if ended >= 0 else 128 - ended
            told = ev.ScriptFinished(status, None, False, self._last_pass, how=describe_exit(ended))
            if self._untold_end is not None:
                self._untold_end(told)
            yield [told]

    async def _output_done(self, timeout: float = 3.0) -> None:
        """Wait until both pipes are read to their end (a subprocess may hold them: not long)."""
        try:
            await asyncio.wait_for(asyncio.gather(*self._tasks[:2], return_exceptions=True), timeout)
        except TimeoutError:
            pass

    def _drain(self) -> list[list[ev.Event]]:
        out = []
        while not self._queue.empty():
            batch = self._queue.get_nowait()
            if batch:
                out.append(batch)
        return out

    async def _wait_exit(self, timeout: float = 10.0) -> int:
        """The child's return code once it has gone (killed if it lingers)."""
        assert self.process is not None
        try:
            return await asyncio.wait_for(self.process.wait(), timeout)
        except TimeoutError:
            await self._kill()
            return await self.process.wait()

    async def quit(self) -> None:
        """Ask the agent to stop; kill its process group if it has not ended within QUIT_WAIT."""
        if self.process is None or self.process.returncode is not None:
            return
        if self._remote is not None:
            await self._remote.quit()
        try:
            await asyncio.wait_for(self.process.wait(), QUIT_WAIT)
        except TimeoutError:
            await self._kill()

    async def detach(self) -> None:
        """A child agent lives only with its UI: detaching from it is quitting it."""
        await self.quit()

    async def _kill(self) -> None:
        """SIGKILL the child's process group (its subprocesses too)."""
        process = self.process
        if process is None or process.returncode is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            await asyncio.wait_for(process.wait(), 2.0)
        except TimeoutError:
            pass

    def kill_now(self) -> None:
        """Synchronous last resort (a signal handler, interpreter exit): SIGKILL the child's group."""
        process = self.process
        if process is not None and process.returncode is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
