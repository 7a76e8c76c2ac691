"""`RemoteTarget`: a DebugTarget that is an agent at the other end of a socket.

Asyncio all through, so the UI's event loop reads events and sends commands without a
thread: `start` does the hello and the token, `batches` yields each frame's events decoded,
`submit` writes a frame holding the command (parsed by the client, typed on the wire:
gradtui.wire.frames) and returns its request id.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
from collections.abc import AsyncIterator
from typing import Any

from gradtui.protocol import events as ev
from gradtui.protocol.commands import Command
from gradtui.wire import frames, protocol
from gradtui.wire.passgraphs import GraphsRead
from gradtui.wire.target import TargetError, TargetInfo


class RemoteTarget:
    """An agent reached over a socket (TCP `address`, or an already connected `sock`)."""

    def __init__(
        self,
        token: str,
        *,
        address: tuple[str, int] | None = None,
        sock: socket.socket | None = None,
        script: str = "",
        hello_timeout: float = protocol.HELLO_TIMEOUT,
    ) -> None:
        """`hello_timeout`: how long the agent may take to say hello (a child agent that is
        still importing torch takes seconds)."""
        self._token = token
        self._hello_timeout = hello_timeout
        self._address = address
        self._sock = sock
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._ids = itertools.count(1)
        self.info = TargetInfo(script)
        self.bye: str | None = None
        """The agent's goodbye (why it closed), once it said one."""

    async def start(self) -> None:
        """Connect and authenticate; TargetError with the reason if refused."""
        try:
            if self._sock is not None:
                self._reader, self._writer = await asyncio.open_connection(sock=self._sock, limit=1 << 24)
            else:
                assert self._address is not None
                host, port = self._address
                self._reader, self._writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port, limit=1 << 24), protocol.HELLO_TIMEOUT
                )
        except (TimeoutError, OSError) as exc:
            where = f"{self._address[0]}:{self._address[1]}" if self._address else "the agent"
            raise TargetError(
                f"cannot reach {where}: {_reason(exc)} "
                "(is the agent still running? `gradtui attach` lists running agents)"
            ) from None
        assert self._reader is not None  # connected above
        try:
            hello = await asyncio.wait_for(protocol.read_frame_async(self._reader), self._hello_timeout)
            protocol.check_hello(hello)
            self._send({"auth": self._token, "version": protocol.VERSION})
            answer = await asyncio.wait_for(protocol.read_frame_async(self._reader), protocol.HELLO_TIMEOUT)
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
            raise TargetError(f"the agent did not answer the hello: {_reason(exc)}") from None
        except protocol.ProtocolError as exc:
            raise TargetError(str(exc)) from None
        if answer is None:
            raise TargetError("the agent closed the connection during the hello")
        if "refused" in answer:
            raise TargetError(f"refused by the agent: {answer['refused']}")
        info = answer.get("welcome") or {}
        self.info = TargetInfo(
            info.get("script", self.info.script),
            tuple(info.get("argv", ())),
            info.get("pid"),
            info.get("kind", "agent"),
            info,
        )

    def _send(self, message: dict[str, Any]) -> None:
        """Write the hello's answer (a flat map)."""
        self._write(protocol.encode(message))

    def _write(self, frame: bytes) -> None:
        if self._writer is None or self._writer.is_closing():
            return
        self._writer.write(frame)

    def submit(self, command: Command) -> int:
        """Send a command; returns its request id."""
        request = next(self._ids)
        self._write(frames.encode(frames.Submit.of(command, request)))
        return request

    def show_flow(self, shown: bool) -> None:
        """Tell the agent whether this client shows every pass's gradient flow now (the agent
        computes a hooked pass's flow only for a client that shows it, or a pass it saw paused)."""
        self._write(frames.encode(frames.ShowFlow(shown)))

    def drawn(self, pass_index: int) -> None:
        """Tell the agent this client has drawn the end of pass `pass_index` (one sent described):
        it describes the next pass that starts, and, from now on, only a pass that starts once the
        client has drawn the last one (or one that pauses: gradtui.agent.server).

        Written straight to the socket, not through the stream's transport, whenever the transport
        has nothing waiting (so frames stay in order): the agent may have ended meanwhile (its
        script's last passes run while the client draws), and a write the transport fails aborts
        the connection, dropping what it has not read yet (those passes, the script's end, the
        goodbye). A failed write here is only a pass the agent will not describe."""
        frame = frames.encode(frames.Drawn(pass_index))
        writer = self._writer
        if writer is None or writer.is_closing():
            return
        sock = writer.get_extra_info("socket")
        if sock is None or writer.transport.get_write_buffer_size():
            self._write(frame)
            return
        try:
            sent = os.write(sock.fileno(), frame)
        except BlockingIOError:
            sent = 0
        except OSError:  # the agent has gone: nothing to pace
            return
        if sent < len(frame):
            self._write(frame[sent:])

    async def batches(self) -> AsyncIterator[list[ev.Event]]:
        """The events of every frame that has arrived, as one batch a step, until the agent says
        goodbye or the connection ends."""
        assert self._reader is not None, "start() first"
        pending = bytearray()
        graphs = GraphsRead()  # this connection's: a pass may be sent as a reference to the last
        while True:
            try:
                messages = await protocol.read_frames_async(self._reader, pending)
            except (OSError, protocol.ProtocolError):
                messages = None
            if messages is None:
                return
            events: list[ev.Event] = []  # every frame that has arrived, as one batch (read_frames_async)
            for message in messages:
                if "bye" in message:
                    self.bye = message["bye"]
                    if events:
                        yield _flat(events)
                    return
                events.extend(graphs.from_wire(e) for e in message.get("events") or ())
            if events:
                yield _flat(events)

    async def quit(self) -> None:
        """Ask the agent to stop the script."""
        self._write(frames.encode(frames.Quit()))
        await self._drain()

    async def detach(self) -> None:
        """Leave the agent running; close our end."""
        self._write(frames.encode(frames.Detach()))
        await self._drain()
        self.close()

    async def _drain(self) -> None:
        if self._writer is not None and not self._writer.is_closing():
            try:
                await asyncio.wait_for(self._writer.drain(), 1.0)
            except (TimeoutError, OSError):
                pass

    def close(self) -> None:
        """Close the connection (no message)."""
        if self._writer is not None:
            self._writer.close()


def _reason(exc: BaseException) -> str:
    """Why a connection failed, never blank (a timeout's `str` is empty)."""
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "timed out"
    text = getattr(exc, "strerror", None) or str(exc)
    return text or type(exc).__name__


def _flat(events: list[ev.Event]) -> list[ev.Event]:
    """`events` with each NodesRan batch (the agent sends a pass's nodes a batch at a time: one
    event through its lock and queue, not one per node) in place of its NodeRan events, as a
    client reads them."""
    if not any(type(e) is ev.NodesRan for e in events):
        return events
    flat: list[ev.Event] = []
    for e in events:
        if type(e) is ev.NodesRan:
            flat.extend(e.ran)
        else:
            flat.append(e)
    return flat
