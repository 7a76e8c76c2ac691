"""The hub's connection to another rank's agent, and whether a rank's process still runs."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

from gradtui.protocol import events as ev
from gradtui.wire import frames, protocol
from gradtui.wire.passgraphs import GraphsRead


class RankConn:
    """The hub's client connection to one other rank's agent (plain sockets, a reader thread)."""

    def __init__(
        self,
        rank: int,
        address: str,
        token: str,
        on_event: Callable[[int, ev.Event], None],
        on_gone: Callable[[int, str | None], None],
    ) -> None:
        from gradtui.wire.runtime import parse_address

        self.rank = rank
        host, port = parse_address(address)
        self._sock = socket.create_connection((host, port), timeout=protocol.HELLO_TIMEOUT)
        protocol.check_hello(protocol.read_frame(self._sock))
        self._sock.sendall(protocol.encode({"auth": token, "version": protocol.VERSION}))
        answer = protocol.read_frame(self._sock)
        if answer is None or "refused" in answer:
            raise protocol.ProtocolError(f"rank {rank}'s agent refused the hub: {(answer or {}).get('refused')}")
        self._sock.settimeout(None)
        self._lock = threading.Lock()
        self._on_event, self._on_gone = on_event, on_gone
        self._thread = threading.Thread(target=self._read, name=f"gradtui-hub-rank{rank}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        bye = None
        graphs = GraphsRead()  # this connection's: a pass may be sent as a reference to the last
        try:
            while (message := protocol.read_frame(self._sock)) is not None:
                if "bye" in message:
                    bye = message["bye"]
                    break
                for data in message.get("events") or ():
                    self._on_event(self.rank, graphs.from_wire(data))
        except (OSError, protocol.ProtocolError):
            pass
        self._on_gone(self.rank, bye)

    def send(self, frame: frames.ClientFrame) -> None:
        """Send one frame (quietly nothing if the rank is gone)."""
        try:
            with self._lock:
                self._sock.sendall(frames.encode(frame))
        except OSError:
            pass

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
