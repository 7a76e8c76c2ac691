"""Who the agent lets into the hello: what a stranger without the token may cost it.

A connection that has not shown the token yet is counted (`Gate`): at most MAX_PENDING are in
the hello at once, and the next ones are refused at once with a one-line reason, so a flood of
silent or trickling peers costs the agent a bounded number of threads, sockets and bytes, and the
listening loop never waits on any of them. When the process has run out of file descriptors
(EMFILE) the connection waiting in the kernel's backlog cannot even be accepted; `FdReserve`
keeps one descriptor back to accept it and tell it why, instead of leaving it to time out. And a
connection in the hello may not take the script's last descriptors (`leaves_enough_fds`): under a
low `ulimit -n`, strangers holding sockets open while the script imports torch made its imports
fail with EMFILE; a connection accepted while fewer than `SCRIPT_FDS` stay free is refused at once.
"""

from __future__ import annotations

import os
import resource
import socket
import threading

from gradtui.wire import protocol

MAX_PENDING = 8
"""Connections that may be in the hello at once; more are refused at once."""

SCRIPT_FDS = 4
"""File descriptors that connections in the hello always leave free for the script (at least; a
quarter of the limit where that is more)."""

REFUSE_TIMEOUT = 0.5
"""Seconds a refused connection has to take its one-line refusal."""


def refuse(conn: socket.socket, reason: str, code: str = "busy") -> None:
    """Send `conn` a refusal (quickly, or not at all) and close it."""
    conn.settimeout(REFUSE_TIMEOUT)
    try:
        conn.sendall(protocol.encode({"refused": reason, "code": code}))
    except OSError:
        pass
    close_quietly(conn)


def close_quietly(sock: socket.socket) -> None:
    """Shut down and close `sock`, whatever state it is in."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class Gate:
    """Counts the connections in the hello, up to `limit` (see module doc)."""

    def __init__(self, limit: int = MAX_PENDING) -> None:
        self.limit = limit
        self._count = 0
        self._lock = threading.Lock()

    def enter(self) -> bool:
        """Count one more connection in the hello; False (not counted) if `limit` already are."""
        with self._lock:
            if self._count >= self.limit:
                return False
            self._count += 1
            return True

    def leave(self) -> None:
        """A connection counted by `enter` finished its hello (let in or refused)."""
        with self._lock:
            self._count -= 1

    @property
    def count(self) -> int:
        """Connections in the hello now."""
        with self._lock:
            return self._count


class FdReserve:
    """One file descriptor held back for when the process has none left (see module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the accept thread uses it, `close` may come from another
        self._fd = self._take()
        self._closed = False

    @staticmethod
    def _take() -> int | None:
        try:
            return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None

    def refuse_one(self, listener: socket.socket) -> None:
        """Let the reserved fd go, accept one waiting connection with it and refuse it, take it
        again. (Without a reserve, because it could not be taken, just try to take one.)"""
        with self._lock:
            self._refuse_one(listener)

    def _refuse_one(self, listener: socket.socket) -> None:
        if self._closed:
            return
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            try:
                conn, _ = listener.accept()
            except OSError:
                conn = None
            if conn is not None:
                refuse(conn, "the agent's process has run out of file descriptors (ulimit -n): try again later")
        self._fd = self._take()

    def close(self) -> None:
        """Give the reserved fd back."""
        with self._lock:
            fd, self._fd, self._closed = self._fd, None, True
        if fd is not None:
            os.close(fd)


def leaves_enough_fds() -> bool:
    """Does the process have enough descriptors free to let one more connection into the hello
    (one already accepted, counted as open), leaving the script its share (see module doc)?
    True where the count cannot be known (no /proc, no limit)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return True
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            open_now = len(os.listdir(folder)) - 1  # listing the folder opened one more
        except FileNotFoundError:
            continue
        except OSError:
            return False  # EMFILE: none free at all
        return soft - open_now >= max(SCRIPT_FDS, soft // 4)
    return True
