"""The wire protocol: length-prefixed frames of MessagePack, a versioned hello, a token.

A frame is a 4-byte big-endian length and that many bytes of MessagePack (one map), encoded
with msgspec. The conversation:

    agent  -> client   {"hello": "gradtui", "version": VERSION}
    client -> agent    {"auth": TOKEN, "version": VERSION}
    agent  -> client   {"welcome": INFO}          or {"refused": REASON, "code": CODE}, then closes
    client -> agent    Submit(COMMAND, id) | Quit() | Detach() | ShowFlow(BOOL) | Drawn(PASS)    (typed: gradtui.wire.frames)
    agent  -> client   {"events": [EVENT, ...]}   (each EVENT as `codec.to_wire` makes it; a pass's graph
                                                described as the last one sent, but for its sequence numbers,
                                                as a reference to it: gradtui.wire.passgraphs)
    agent  -> client   {"bye": REASON}            the script ended; the agent closes

The agent reads no command before the token is checked, and before it a peer costs the agent
little: the whole hello has one deadline (`handshake_timeout`), the answer may be only
`AUTH_MAX_FRAME` bytes, and it is decoded as a flat map of plain values (`decode_client`); what
an admitted client sends is decoded by its type (gradtui.wire.frames: a command the client
parsed, with the fields its class names), so no nesting can recurse either way. Plain data, not pickle: a client must
never be able to make the agent run code by what it sends (only `set`/`print` expressions,
which are the debugger's job, as in pdb). MessagePack because it was measured (benchmarks/bench.py,
`wire`): on a 10,000-node graph frame msgspec's msgpack encodes and decodes in 0.14x the time of
stdlib json and 0.67x the bytes, and unlike JSON (msgspec's or orjson's) it keeps NaN and
infinities, which a gradient debugger must carry.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import msgspec

VERSION = 7
"""Bumped when a message changes shape (2: a client sends typed commands, not lines; 3: a `break`
carries its parsed spec, not its text, and an agent sends a pass's nodes as NodesRan batches, which
a client hands on as NodeRan events; 4: a NodesRan batch and a PassFinished travel packed, their
Structs as MessagePack bytes, gradtui.wire.codec; 5: a BreakpointsChanged's breakpoints carry
their parsed specs, not their text; 6: a pass whose description is the pass before's but for its
sequence numbers sends them only, gradtui.wire.passgraphs; 7: a client may say `Drawn`, and a pass
it will not show is sent without its graph, `PassStarted.described`, gradtui.agent.server); a
client and an agent of different versions refuse each other."""

HEADER = struct.Struct(">I")
MAX_FRAME = 1 << 30
"""A frame longer than this is a broken or hostile peer (once it has shown the token)."""

AUTH_MAX_FRAME = 512
"""The longest answer to the hello an agent reads: `{"auth": TOKEN, "version": N}` is ~60 bytes,
so a peer without the token cannot make the agent hold more than this."""

HELLO_TIMEOUT = 5.0
"""Seconds a peer has to complete the hello, all of it (`GRADTUI_HANDSHAKE_TIMEOUT` overrides)."""

HANDSHAKE_TIMEOUT_ENV = "GRADTUI_HANDSHAKE_TIMEOUT"


def handshake_timeout() -> float:
    """Seconds an agent gives a connection to complete the whole hello: HELLO_TIMEOUT, or
    `GRADTUI_HANDSHAKE_TIMEOUT` where set to a positive number (the tests set it low)."""
    try:
        value = float(os.environ.get(HANDSHAKE_TIMEOUT_ENV, ""))
    except ValueError:
        return HELLO_TIMEOUT
    return value if value > 0 else HELLO_TIMEOUT


class ProtocolError(Exception):
    """The peer broke the protocol, refused us, or went away mid-frame."""

    def __init__(self, message: str, code: str = "protocol") -> None:
        super().__init__(message)
        self.code = code
        """`token`, `version`, `busy`, `protocol`, `timeout` or `closed`."""


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder()
_CLIENT_DECODER = msgspec.msgpack.Decoder(dict[str, str | int | float | bool | None])
"""A client's answer to the hello is one flat map: decoding it stops at the first nested value
instead of recursing into it."""


def encode(message: dict[str, Any]) -> bytes:
    """One frame holding `message`."""
    payload = _ENCODER.encode(message)
    return HEADER.pack(len(payload)) + payload


def decode(payload: bytes) -> dict[str, Any]:
    """The message in a frame's payload (an agent's: events nest)."""
    try:
        message = _DECODER.decode(payload)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ProtocolError(f"not a gradtui frame: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError("not a gradtui frame: not an object")
    return message


def decode_client(payload: bytes) -> dict[str, Any]:
    """A client's answer to the hello: a flat map of plain values, or ProtocolError."""
    try:
        return _CLIENT_DECODER.decode(payload)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ProtocolError(f"not a gradtui client frame: {exc}") from None


def _length(header: bytes, limit: int = MAX_FRAME) -> int:
    (length,) = HEADER.unpack(header)
    if length > limit:
        raise ProtocolError(f"frame of {length} bytes is too long (at most {limit} here)")
    return length


def recv_exact(sock: socket.socket, size: int, deadline: float | None = None) -> bytes | None:
    """`size` bytes from a blocking socket, or None at a clean end of stream before any.

    `deadline` (a `time.monotonic()` value) bounds the whole read, not each `recv`: a peer
    trickling a byte at a time is cut off when it passes (ProtocolError, code `timeout`)."""
    chunks, got = [], 0
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProtocolError("the peer took too long", "timeout")
            sock.settimeout(left)
        chunk = sock.recv(min(size - got, 1 << 20))
        if not chunk:
            if got == 0:
                return None
            raise ProtocolError("connection closed mid-frame", "closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(
    sock: socket.socket,
    *,
    limit: int = MAX_FRAME,
    deadline: float | None = None,
    decoder: Callable[[bytes], dict[str, Any]] = decode,
) -> dict[str, Any] | None:
    """The next message from a blocking socket; None when the peer closed the connection.

    `limit`: the longest frame accepted (a longer one is refused before it is read);
    `deadline`: see `recv_exact`; `decoder`: `decode_client` for a client's answer to the hello."""
    payload = read_payload(sock, limit=limit, deadline=deadline)
    return None if payload is None else decoder(payload)


def read_payload(sock: socket.socket, *, limit: int = MAX_FRAME, deadline: float | None = None) -> bytes | None:
    """The next frame's payload from a blocking socket, undecoded (gradtui.wire.frames decodes an
    admitted client's); None when the peer closed the connection. `limit`, `deadline`: as `read_frame`."""
    header = recv_exact(sock, HEADER.size, deadline)
    if header is None:
        return None
    payload = recv_exact(sock, _length(header, limit), deadline)
    if payload is None:
        raise ProtocolError("connection closed mid-frame", "closed")
    return payload


async def read_frame_async(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """The next message from an asyncio stream; None when the peer closed the connection."""
    try:
        header = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise ProtocolError("connection closed mid-frame", "closed") from None
        return None
    try:
        payload = await reader.readexactly(_length(header))
    except asyncio.IncompleteReadError:
        raise ProtocolError("connection closed mid-frame", "closed") from None
    return decode(payload)


async def read_frames_async(reader: asyncio.StreamReader, pending: bytearray) -> list[dict[str, Any]] | None:
    """Every message the stream holds complete now, at least one (waiting for it); None when the
    peer closed the connection between frames. `pending` keeps the bytes of a frame not yet
    whole between calls (the caller's, one per stream).

    NOTE: a reader handed one frame at a time by a peer that sends small frames fast (an agent's
    batches, 20 a second) falls behind when it draws once a frame: reading what has arrived and
    cutting every whole frame from it lets it take all of a backlog in one step."""
    while True:
        messages = []
        while len(pending) >= HEADER.size:
            end = HEADER.size + _length(bytes(pending[: HEADER.size]))
            if len(pending) < end:
                break
            messages.append(decode(bytes(pending[HEADER.size : end])))
            del pending[:end]
        if messages:
            return messages
        data = await reader.read(1 << 20)  # what has arrived (up to a MiB), waiting for at least a byte
        if not data:
            if pending:
                raise ProtocolError("connection closed mid-frame", "closed")
            return None
        pending += data


def hello() -> dict[str, Any]:
    """The agent's first message."""
    return {"hello": "gradtui", "version": VERSION}


def check_hello(message: dict[str, Any] | None) -> None:
    """Refuse what is not a gradtui agent of our protocol version."""
    if message is not None and "refused" in message and "hello" not in message:
        raise ProtocolError(f"refused by the agent: {message['refused']}", str(message.get("code", "busy")))
    if message is None or message.get("hello") != "gradtui":
        raise ProtocolError("that address is not a gradtui agent")
    if message.get("version") != VERSION:
        raise ProtocolError(
            f"the agent speaks protocol version {message.get('version')}, this gradtui "
            f"speaks {VERSION}: run the same gradtui version on both sides",
            "version",
        )
