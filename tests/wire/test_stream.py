"""An agent's stream as a client reads it: every frame that has arrived is taken in one step (a
UI that drew once a frame fell behind a peer sending small frames fast), a frame split across
reads waits for its rest, and a stream cut mid-frame is an error, never a silent end."""

from __future__ import annotations

import asyncio

import pytest

from gradtui.wire import protocol


def _stream(*chunks: bytes, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    for chunk in chunks:
        reader.feed_data(chunk)
    if eof:
        reader.feed_eof()
    return reader


def test_every_frame_that_has_arrived_is_read_in_one_step_in_order():
    frames = b"".join(protocol.encode({"events": [n]}) for n in range(5))

    async def read() -> list[object]:
        reader, pending = _stream(frames), bytearray()
        first = await protocol.read_frames_async(reader, pending)
        return [first, await protocol.read_frames_async(reader, pending)]

    first, then = asyncio.run(read())
    assert first == [{"events": [n]} for n in range(5)]
    assert then is None  # the peer closed between frames: a clean end


def test_a_frame_split_across_reads_waits_for_its_rest():
    frame = protocol.encode({"bye": "the script ended"})

    async def read() -> tuple[list[dict[str, object]] | None, bool]:
        reader, pending = _stream(frame[:3], eof=False), bytearray()
        task = asyncio.ensure_future(protocol.read_frames_async(reader, pending))
        await asyncio.sleep(0.05)
        waited = not task.done()
        reader.feed_data(frame[3:])
        return await asyncio.wait_for(task, 5), waited

    messages, waited = asyncio.run(read())
    assert waited and messages == [{"bye": "the script ended"}]


def test_a_stream_cut_mid_frame_is_an_error():
    frame = protocol.encode({"events": [1, 2, 3]})

    async def read() -> None:
        await protocol.read_frames_async(_stream(frame[:-1]), bytearray())

    with pytest.raises(protocol.ProtocolError, match="mid-frame"):
        asyncio.run(read())


def test_a_frame_longer_than_the_limit_is_refused_before_it_is_read():
    header = protocol.HEADER.pack(protocol.MAX_FRAME + 1)

    async def read() -> None:
        await protocol.read_frames_async(_stream(header), bytearray())

    with pytest.raises(protocol.ProtocolError, match="too long"):
        asyncio.run(read())
