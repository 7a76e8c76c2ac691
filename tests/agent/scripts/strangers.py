"""A stranger on the machine: COUNT connections to an agent, none with the token, for SECONDS.

Usage: python strangers.py HOST PORT COUNT SECONDS. The connections take turns at four ways of
costing an agent before the token: silent (connect, read the hello, say nothing), trickling (a
header announcing 1 MiB, then one byte every 0.25 s), oversized (a header announcing 1 GiB, then
zeros as fast as the agent takes them) and deeply nested (200,000 nested msgpack arrays as the
token's frame). One thread, non-blocking sockets; every socket is closed at the end. Prints one
JSON line: how many connected and how many the agent closed or refused.
"""

import errno
import json
import selectors
import socket
import struct
import sys
import time

KINDS = ("silent", "trickle", "oversized", "nested")
DEEP = b"\x91" * 200_000 + b"\xc0"


def opening(kind: str) -> bytes:
    """What a connection of `kind` sends first."""
    match kind:
        case "trickle":
            return struct.pack(">I", 1 << 20)
        case "oversized":
            return struct.pack(">I", 1 << 30)
        case "nested":
            return struct.pack(">I", len(DEEP)) + DEEP
    return b""


def main(host: str, port: int, count: int, seconds: float) -> None:
    selector = selectors.DefaultSelector()
    socks: dict[socket.socket, dict] = {}
    stats = {"opened": 0, "connect_failed": 0, "closed_by_agent": 0}
    end = time.monotonic() + seconds
    for i in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        code = sock.connect_ex((host, port))
        if code not in (0, errno.EINPROGRESS):
            stats["connect_failed"] += 1
            sock.close()
            continue
        kind = KINDS[i % len(KINDS)]
        socks[sock] = {"kind": kind, "out": opening(kind), "next": 0.0}
        selector.register(sock, events(socks[sock]))
        stats["opened"] += 1
    while time.monotonic() < end and socks:
        ready = selector.select(timeout=0.05)
        due = [(s, 0) for s, state in socks.items() if state["kind"] == "trickle" and not state["out"]]
        for sock, mask in [(key.fileobj, mask) for key, mask in ready] + due:
            if sock not in socks:
                continue
            state = socks[sock]
            try:
                if mask & selectors.EVENT_READ and not sock.recv(65536):
                    raise ConnectionResetError
                send(sock, state, writable=bool(mask & selectors.EVENT_WRITE))
                selector.modify(sock, events(state))
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                stats["closed_by_agent"] += 1
                selector.unregister(sock)
                sock.close()
                del socks[sock]
    for sock in socks:
        sock.close()
    print(json.dumps(stats), flush=True)


def events(state: dict) -> int:
    """Wait to write only while there is something to write (no busy loop on idle sockets)."""
    writing = state["out"] or state["kind"] == "oversized"
    return selectors.EVENT_READ | (selectors.EVENT_WRITE if writing else 0)


def send(sock: socket.socket, state: dict, writable: bool) -> None:
    """The next bytes of a connection, as its kind sends them."""
    now = time.monotonic()
    if state["out"] and writable:
        sent = sock.send(state["out"])
        state["out"] = state["out"][sent:]
    elif state["kind"] == "oversized" and writable:
        sock.send(b"\0" * 65536)
    elif state["kind"] == "trickle" and not state["out"] and now >= state["next"]:
        sock.send(b"\0")
        state["next"] = now + 0.25


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
