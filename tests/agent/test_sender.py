"""A client's frames and their deadlines: a frame that cannot begin in time is not sent at all,
so the stream stays whole and the goodbye, which may begin later, can still be read."""

from __future__ import annotations

import socket
import time

from gradtui.agent.sender import ClientSender
from gradtui.wire import protocol

WAIT = 10.0
"""Seconds a read of the test waits (a wait timeout, not a speed assertion)."""


def test_a_frame_that_cannot_begin_in_time_leaves_the_stream_whole_for_the_goodbye():
    ours, theirs = socket.socketpair()
    try:
        sender = ClientSender(theirs)
        now = time.monotonic()
        sender.limit(now, now + WAIT)  # frames had to begin by now; the goodbye's time is ahead
        assert not sender.send(protocol.encode({"events": ["late"]}))
        assert not sender.broken  # nothing of it was written
        assert sender.send(protocol.encode({"bye": "the script ended"}), last=True)
        ours.settimeout(WAIT)
        assert protocol.read_frame(ours) == {"bye": "the script ended"}
    finally:
        ours.close()
        theirs.close()


def test_the_goodbye_too_is_not_begun_past_the_end():
    ours, theirs = socket.socketpair()
    try:
        sender = ClientSender(theirs)
        now = time.monotonic()
        sender.limit(now, now)
        assert not sender.send(protocol.encode({"bye": "the script ended"}), last=True)
        theirs.close()
        ours.settimeout(WAIT)
        assert protocol.read_frame(ours) is None  # nothing was written: the stream just ends
    finally:
        ours.close()
