"""The wire protocol: length-prefixed frames of MessagePack, a versioned hello, a token.

A frame is a 4-byte big-endian length and that many bytes of MessagePack (one map), encoded
with msgspec. The conversation:

    agent  -> client   {"hello": "gradtui", "version": VERSION}
    client -> agent    {"auth": TOKEN, "version": VERSION}
    agent  -> client   {"welcome": INFO}          or {"refused": REASON, "code": CODE}, then closes
    client -> agent    {"submit": TEXT, "id": N} | {"quit": true} | {"detach": true}
    agent  -> client   {"events": [EVENT, ...]}   (each EVENT as `codec.to_wire` makes it)
    agent  -> client   {"bye": REASON}            the script ended; the agent closes

The agent reads no command before the token is checked. Plain data, not pickle: a client must
never be able to make the agent run code by what it sends (only `set`/`print` expressions,
which are the debugger's job, as in pdb). MessagePack because it was measured (scripts/bench.py,
`wire`): on a 10,000-node graph frame msgspec's msgpack encodes and decodes in 0.14x the time of
stdlib json and 0.67x the bytes, and unlike JSON (msgspec's or orjson's) it keeps NaN and
infinities, which a gradient debugger must carry.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

import msgspec

VERSION = 1
"""Bumped when a message changes shape; a client and an agent of different versions refuse each other."""

HEADER = struct.Struct(">I")
MAX_FRAME = 1 << 30
"""A frame longer than this is a broken or hostile peer."""

HELLO_TIMEOUT = 5.0
"""Seconds a peer has to complete the hello."""


class ProtocolError(Exception):
    """The peer broke the protocol, refused us, or went away mid-frame."""

    def __init__(self, message: str, code: str = "protocol") -> None:
        super().__init__(message)
        self.code = code
        """`token`, `version`, `busy`, `protocol` or `closed`."""


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder()


def encode(message: dict[str, Any]) -> bytes:
    """One frame holding `message`."""
    payload = _ENCODER.encode(message)
    return HEADER.pack(len(payload)) + payload


def decode(payload: bytes) -> dict[str, Any]:
    """The message in a frame's payload."""
    try:
        message = _DECODER.decode(payload)
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"not a gradtui frame: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError("not a gradtui frame: not an object")
    return message


def _length(header: bytes) -> int:
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME:
        raise ProtocolError(f"frame of {length} bytes is too long")
    return length


def recv_exact(sock: socket.socket, size: int) -> bytes | None:
    """`size` bytes from a blocking socket, or None at a clean end of stream before any."""
    chunks, got = [], 0
    while got < size:
        chunk = sock.recv(min(size - got, 1 << 20))
        if not chunk:
            if got == 0:
                return None
            raise ProtocolError("connection closed mid-frame", "closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket) -> dict[str, Any] | None:
    """The next message from a blocking socket; None when the peer closed the connection."""
    header = recv_exact(sock, HEADER.size)
    if header is None:
        return None
    payload = recv_exact(sock, _length(header))
    if payload is None:
        raise ProtocolError("connection closed mid-frame", "closed")
    return decode(payload)


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


def hello() -> dict[str, Any]:
    """The agent's first message."""
    return {"hello": "gradtui", "version": VERSION}


def check_hello(message: dict[str, Any] | None) -> None:
    """Refuse what is not a gradtui agent of our protocol version."""
    if message is None or message.get("hello") != "gradtui":
        raise ProtocolError("that address is not a gradtui agent")
    if message.get("version") != VERSION:
        raise ProtocolError(f"the agent speaks protocol version {message.get('version')}, this gradtui "
                            f"speaks {VERSION}: run the same gradtui version on both sides", "version")
