"""`gradtui --listen` and a script that forks: a forked child never pauses (no client can reach
it; it runs on unhooked and gradtui says so once, on its own stderr), and no forked child
outlives the agent."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from tests.processes import PROCESS_TIMEOUT, Listening, gone

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "agent"
FORKED = "was forked from the script's process: it runs on unhooked"


def test_a_forked_child_runs_on_unhooked_and_the_parent_pauses_as_ever(tmp_path):
    agent = Listening(HERE / "forks.py", tmp_path, "127.0.0.1:0", "backward")
    try:
        agent.wait_listening()
        agent.wait_stdout(b"child ended 0\n")  # the child's backward did not wait for a client
        done = agent.attach("--headless", "-c", "continue")  # the parent's backward waits for one
        assert done.returncode == 0 and "pass 0 done" in done.stdout, done.stderr
        assert agent.wait() == 0
        out, err = agent.output()
        assert out == b"forking\nchild grad 3.0\nchild ended 0\nparent grad 5.0\n", out  # torch's grads, plain
        assert err.decode().count(FORKED) == 1, err
    finally:
        agent.close()


def test_a_forked_child_does_not_outlive_the_agent(tmp_path):
    agent = Listening(HERE / "forks.py", tmp_path, "127.0.0.1:0", "sleeps")
    child = None
    try:
        agent.wait_listening()
        agent.wait_stdout(b"sleeping\n")
        child = int(re.search(rb"child (\d+) sleeping", agent.output()[0]).group(1))
        os.kill(agent.process.pid, signal.SIGKILL)  # the agent alone, not its process group
        agent.process.wait(PROCESS_TIMEOUT)
        deadline = time.monotonic() + PROCESS_TIMEOUT
        while not gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone(child), "the forked child outlived the agent"
    finally:
        if child is not None and not gone(child):
            os.kill(child, signal.SIGKILL)
        agent.close()
