"""Ctrl-C in `gradtui attach --headless` is one line on stderr and the exit python gives after
one (killed by SIGINT: a shell sees 130), at whatever moment it comes: as the client has just
attached, while it waits on the running agent, while the script's output streams in. It was a
~30-line asyncio traceback of gradtui's internals (when it came while the client waited)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import SCRIPTS
from tests.processes import PROCESS_TIMEOUT, Listening

TRIALS = 3
"""Times each moment is tried."""

COMMANDS = ["-c", "break pass 10000000", "-c", "continue", "-c", "print"]
"""A client that never runs out of commands: it waits on the agent until it is interrupted."""

MOMENTS = {
    "attached": rb"\(gradtui\) break pass",  # its first command sent: it has just attached
    "waiting": rb"  breakpoint \d+ at pass 10000000\n",  # answered: the client waits for a pause, the agent runs
    "streaming": rb"step \d+\n(.|\n)*step \d+\n",  # the script's output streaming in
}


class Attach:
    """`gradtui attach --headless` against `agent`, its output read without blocking."""

    def __init__(self, agent: Listening) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gradtui", "attach", "--headless", *COMMANDS],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=agent.env,
            start_new_session=True,
        )
        self.agent = agent
        self.out = b""
        self.err = b""
        for stream in (self.process.stdout, self.process.stderr):
            os.set_blocking(stream.fileno(), False)

    def read(self) -> None:
        """Take in what it wrote since (and drain the agent's, whose script prints every step)."""
        self.agent.output()
        for name, stream in (("out", self.process.stdout), ("err", self.process.stderr)):
            chunk = stream.read()
            if chunk:
                setattr(self, name, getattr(self, name) + chunk)

    def wait_for(self, pattern: bytes) -> None:
        """Until its stdout matches `pattern`."""
        deadline = time.monotonic() + PROCESS_TIMEOUT
        while not re.search(pattern, self.out):
            assert self.process.poll() is None, (
                f"attach ended {self.process.returncode}: {self.out[-2000:]!r} {self.err!r}"
            )
            assert time.monotonic() < deadline, f"{pattern!r} not seen: {self.out[-2000:]!r} {self.err!r}"
            self.read()
            time.sleep(0.02)

    def interrupt(self) -> int:
        """SIGINT (Ctrl-C), then its exit status once it has ended (SIGKILLed if it has not in time)."""
        self.process.send_signal(signal.SIGINT)
        try:
            deadline = time.monotonic() + 30
            while self.process.poll() is None and time.monotonic() < deadline:
                self.read()
                time.sleep(0.02)
        finally:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
            self.read()
            self.process.stdout.close()
            self.process.stderr.close()
        return self.process.returncode


@pytest.fixture
def agent(tmp_path):
    """endless_loop.py under `gradtui --listen`, its first pause let go by a first client."""
    listening = Listening(SCRIPTS / "endless_loop.py", tmp_path)
    try:
        listening.wait_listening()
        first = listening.attach("--headless", "-c", "continue")
        assert first.returncode == 0, first.stderr
        yield listening
    finally:
        listening.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("moment", MOMENTS)
def test_ctrl_c_in_attach_headless_is_one_line_and_python_s_exit(agent, moment):
    for trial in range(TRIALS):
        attach = Attach(agent)
        attach.wait_for(MOMENTS[moment])
        status = attach.interrupt()
        err = attach.err.decode(errors="replace")
        assert "Traceback" not in err and "Task was destroyed" not in err and "Exception ignored" not in err, (
            f"{moment}, trial {trial}:\n{err}"
        )
        assert err.splitlines() == ["gradtui attach: interrupted (Ctrl-C); the agent goes on as after a detach"], (
            f"{moment}, trial {trial}:\n{err}"
        )
        assert status == -signal.SIGINT, f"{moment}, trial {trial}: exit {status}"  # python's: a shell sees 130
        assert agent.process.poll() is None  # the agent runs on, for the next client


INTERRUPTED_IMPORT = """
import builtins
real = builtins.__import__
def interrupted(name, *args, **kwargs):
    if name == "gradtui.cli.main":
        raise KeyboardInterrupt  # Ctrl-C while gradtui's modules import
    return real(name, *args, **kwargs)
builtins.__import__ = interrupted
from gradtui.cli.entry import main
main()
"""


def test_ctrl_c_while_gradtui_imports_is_one_line_and_python_s_exit():
    """The first few tenths of a second of every gradtui command import its modules: a Ctrl-C
    then is the same one line and exit, not a traceback through the import machinery."""
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_IMPORT], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert done.stderr.splitlines() == ["gradtui: interrupted (Ctrl-C)"], done.stderr
    assert done.returncode == -signal.SIGINT
