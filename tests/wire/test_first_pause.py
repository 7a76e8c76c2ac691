"""The run's first pause waits for a client, whoever came and went: a client that leaves there
(a browser tab reloaded or closed, `gradtui attach` whose commands ran out) leaves the script
paused at the same node for the next one. A pause a client's `step` made still resumes by
itself when that client leaves (the script runs on with its breakpoints armed)."""

from __future__ import annotations

from tests.helpers import SCRIPTS
from tests.processes import Listening


def test_a_client_that_leaves_at_the_first_pause_leaves_the_script_paused_there(tmp_path):
    agent = Listening(SCRIPTS / "chain.py", tmp_path)
    try:
        agent.wait_listening()
        for _ in range(2):  # twice: the first pause outlives more than one client
            looked = agent.attach("--headless", "-c", "print")
            assert looked.returncode == 0, looked.stderr
            assert "paused before #0 PowBackward0 (z)" in looked.stdout and "detached" in looked.stdout
            assert agent.process.poll() is None
        last = agent.attach("--headless", "-c", "continue")
        assert last.returncode == 0, last.stderr
        assert "pass 0" in last.stdout and "paused before #0 PowBackward0 (z)" in last.stdout
        assert agent.wait() == 0
        assert b"x.grad = 36.0" in agent.output()[0]
    finally:
        agent.close()


def test_a_pause_a_step_made_resumes_when_its_client_leaves(tmp_path):
    agent = Listening(SCRIPTS / "chain.py", tmp_path)
    try:
        agent.wait_listening()
        stepped = agent.attach("--headless", "-c", "step")
        assert stepped.returncode == 0, stepped.stderr
        assert "paused before #1 MulBackward0 (y)" in stepped.stdout and "detached" in stepped.stdout
        assert agent.wait() == 0  # no client needed: the script ran to its end
        assert b"x.grad = 36.0" in agent.output()[0]
    finally:
        agent.close()
