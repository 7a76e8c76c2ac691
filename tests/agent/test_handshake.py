"""The agent's side of the hello, in process: what a peer without the token can cost it.

An `AgentServer` on a loopback port, driven with raw sockets: the accept loop outlives a failed
`accept`, at most a few connections are in the hello at once, the whole hello has one deadline,
the token's frame is small, nothing a peer sends makes a server thread raise (no traceback on
fd 2, which under --listen is the script's stderr), and a client told no says why.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import struct
import time

import pytest

from gradtui.agent.server import AgentServer, ServerHooks
from gradtui.wire import protocol
from gradtui.wire.client import RemoteTarget
from gradtui.wire.target import TargetError

TOKEN = "the-token"
WAIT = 10.0
"""Seconds any read of the test waits (a wait timeout, not a speed assertion)."""
DEEP = b"\x91" * 200_000 + b"\xc0"
"""200,000 nested msgpack arrays: recursing into it raises RecursionError."""


class FlakyListener:
    """A listening socket whose first `fail` accepts raise EMFILE, as a process out of fds does."""

    def __init__(self, sock: socket.socket, fail: int) -> None:
        self.sock, self.fail = sock, fail

    def accept(self):
        if self.fail > 0:
            self.fail -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return self.sock.accept()

    def shutdown(self, how: int) -> None:
        self.sock.shutdown(how)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def serve(monkeypatch):
    """Start an AgentServer on a loopback port: `serve(fail, deadline)` -> its address. `fail`:
    accepts that fail with EMFILE first; `deadline`: seconds the whole hello may take."""
    started: list[AgentServer] = []

    def start(fail: int = 0, deadline: float = 0.5) -> tuple[str, int]:
        monkeypatch.setenv("GRADTUI_HANDSHAKE_TIMEOUT", str(deadline))
        sock = socket.create_server(("127.0.0.1", 0), backlog=16)
        address = sock.getsockname()[:2]
        listener = FlakyListener(sock, fail) if fail else sock
        server = AgentServer(listener, TOKEN, ServerHooks(submit=lambda text, request: None, quit=lambda: None))
        server.start()
        started.append(server)
        return address

    yield start
    for server in started:
        server.close(timeout=0.1)


def connect(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address, timeout=WAIT)
    sock.settimeout(WAIT)
    return sock


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def authenticate(address: tuple[str, int]) -> tuple[socket.socket, dict]:
    """A client with the token: its socket and the agent's answer."""
    sock = connect(address)
    assert protocol.read_frame(sock)["hello"] == "gradtui"
    sock.sendall(protocol.encode({"auth": TOKEN, "version": protocol.VERSION}))
    return sock, protocol.read_frame(sock)


def start_target(target: RemoteTarget) -> None:
    """`target.start()` within WAIT, its connection closed after either way."""

    async def run() -> None:
        try:
            await asyncio.wait_for(target.start(), WAIT)
        finally:
            target.close()

    asyncio.run(run())


def closed_by_agent(sock: socket.socket) -> bool:
    """Read until the agent closes `sock` (True) or WAIT passes (False)."""
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_failed_accept_is_retried_and_the_waiting_client_is_told_why(serve, capfd):
    address = serve(fail=1)
    first = connect(address)  # accepted on the reserved fd, and refused with the reason
    answer = protocol.read_frame(first)
    assert answer is not None and "file descriptors" in answer["refused"]
    first.close()
    sock, welcome = authenticate(address)  # the accept loop lives on
    assert "welcome" in welcome
    sock.close()
    err = capfd.readouterr().err
    assert err.count("accepting a client failed") == 1 and "Traceback" not in err


def test_at_most_eight_connections_are_in_the_hello_and_the_next_is_refused_at_once(serve):
    address = serve(deadline=3.0)  # long enough that all eight are still in the hello on a busy machine
    silent = [connect(address) for _ in range(8)]
    for sock in silent:
        assert protocol.read_frame(sock)["hello"] == "gradtui"
    target = RemoteTarget(TOKEN, address=address)
    with pytest.raises(TargetError, match="waiting to show the token"):
        start_target(target)
    for sock in silent:  # the deadline drops each silent one, freeing its place
        assert closed_by_agent(sock)
        sock.close()
    sock, welcome = authenticate(address)
    assert "welcome" in welcome
    sock.close()


def test_the_whole_hello_has_one_deadline_a_trickling_peer_is_cut_off(serve):
    address = serve()
    sock = connect(address)
    protocol.read_frame(sock)
    sock.sendall(struct.pack(">I", 100))
    cut = False
    for _ in range(100):  # one byte every 0.1 s: each recv is quick, the whole is 10 s
        try:
            sock.sendall(b"\0")
        except (BrokenPipeError, ConnectionResetError):
            cut = True
            break
        time.sleep(0.1)
    sock.close()
    assert cut, "a peer trickling its token frame was never cut off"


@pytest.mark.parametrize("announced", [1 << 30, 1 << 20, protocol.AUTH_MAX_FRAME + 1])
def test_a_token_frame_longer_than_the_auth_message_is_refused_before_it_is_read(serve, announced):
    address = serve()
    sock = connect(address)
    protocol.read_frame(sock)
    sock.sendall(struct.pack(">I", announced) + b"\0" * 1000)
    answer = protocol.read_frame(sock)
    assert answer is not None and "too long" in answer["refused"]
    sock.close()


def test_deeply_nested_frames_are_refused_without_a_traceback_before_and_after_the_token(serve, capfd):
    address = serve()
    stranger = connect(address)
    protocol.read_frame(stranger)
    stranger.sendall(frame(DEEP))
    assert "refused" in protocol.read_frame(stranger)
    stranger.close()
    nested = connect(address)  # within the size allowed: nesting is refused by the decoder
    protocol.read_frame(nested)
    nested.sendall(frame(b"\x82\xa4auth\x91\x91\x91\xc0\xa7version\x01"))
    assert "refused" in protocol.read_frame(nested)
    nested.close()
    client, welcome = authenticate(address)
    assert "welcome" in welcome
    client.sendall(frame(DEEP))  # a client with the token may send big frames, not deep ones
    assert closed_by_agent(client)
    client.close()
    again, welcome = authenticate(address)  # the agent serves the next client
    assert "welcome" in welcome
    again.close()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "RecursionError" not in err


def test_decoding_is_bounded_a_deep_payload_is_a_protocol_error():
    for decode in (protocol.decode, protocol.decode_client):
        with pytest.raises(protocol.ProtocolError):
            decode(DEEP)
    assert protocol.decode_client(b"\x82\xa2id\x01\xa6submit\xa4step") == {"id": 1, "submit": "step"}


def test_a_client_whose_agent_never_says_hello_gets_a_reason():
    with socket.create_server(("127.0.0.1", 0)) as mute:  # listens, never speaks
        target = RemoteTarget(TOKEN, address=mute.getsockname()[:2], hello_timeout=0.3)
        with pytest.raises(TargetError) as refused:
            start_target(target)
    assert "timed out" in str(refused.value) and ":  " not in str(refused.value)
