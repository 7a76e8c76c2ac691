"""What `gradtui --listen` owes the script it runs, whether or not a client is attached: its
uncaught traceback on the agent's stderr as python prints it, and its file descriptors (strangers
waiting in the hello never take the last ones)."""

from __future__ import annotations

import os
import resource
import socket
from pathlib import Path

import gradtui
from gradtui.agent.admission import SCRIPT_FDS
from tests.processes import PROCESS_TIMEOUT, Listening

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "agent"
FD_LIMIT = 18
"""The `ulimit -n` of the attack: the agent, torch imported, has ~10 open; 8 are free."""
STRANGERS = 6
OPENS = SCRIPT_FDS - 1
"""Files the script opens at once: one fewer than the agent leaves free (with no stranger and 8
free, such a script opens 7: something of the process takes one more meanwhile)."""


def test_the_scripts_traceback_is_on_the_agents_stderr_with_no_client_attached(tmp_path):
    agent = Listening(HERE / "raises_plain.py", tmp_path)
    try:
        agent.wait_listening()
        assert agent.wait() == 1
        out, err = agent.output()
        assert out == b"hi\n"
        text = err.decode()
        assert text.count("Traceback (most recent call last):") == 1, text
        assert text.rstrip().endswith('raise ValueError("boom")\nValueError: boom'), text
        package = os.path.dirname(os.path.realpath(gradtui.__file__)) + os.sep
        assert package not in text.split("Traceback", 1)[1], text  # the script's frames only, none of gradtui's
    finally:
        agent.close()


def low_fd_limit() -> None:
    """`ulimit -n 18` in the agent's process, before it starts."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def test_strangers_in_the_hello_leave_the_script_its_file_descriptors(tmp_path):
    marker = tmp_path / "go"
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    agent = Listening(HERE / "opens_files.py", runtime, "127.0.0.1:0", str(marker), str(OPENS), preexec_fn=low_fd_limit)
    strangers: list[socket.socket] = []
    try:
        host, port = agent.wait_listening().rsplit(":", 1)
        agent.wait_stdout(b"ready")  # torch imported: the script holds what it holds
        for _ in range(STRANGERS):  # silent peers, each holding a socket in the agent until the deadline
            strangers.append(socket.create_connection((host, int(port)), timeout=PROCESS_TIMEOUT))
        for sock in strangers:  # each has been taken in: said hello, or refused at once
            sock.settimeout(PROCESS_TIMEOUT)
            assert sock.recv(1), "the agent never answered a connection"
        marker.touch()  # the script now opens OPENS files at once
        assert agent.wait() == 0, agent.output()
        out, err = agent.output()
        assert out == f"ready\nopened {OPENS}\n".encode(), (out, err)
    finally:
        for sock in strangers:
            sock.close()
        agent.close()
