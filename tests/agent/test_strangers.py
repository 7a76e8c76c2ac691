"""A stranger on the machine, without the token, against a paused agent: refused without cost.

From another process, 300 slow or malformed connections (silent, trickling, oversized, deeply
nested) against `gradtui --listen` paused at its first node, run under `ulimit -n 256`. After
them the agent's memory is where it was, no traceback appeared in its output nor in what a
client is sent as the script's, and a client with the token attaches and steps.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from gradtui.protocol import events as ev
from gradtui.wire import frames
from tests.processes import Listening, RawClient, rss

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "agent"
CONNECTIONS = 300
ATTACK_SECONDS = 3.0
ATTACH_WAIT = 5.0
"""Seconds the client with the token is given to attach and step (a wait timeout, not a speed assertion)."""
RSS_SLACK = 50 * 1024 * 1024


def low_fd_limit() -> None:
    """`ulimit -n 256` in the agent's process, before it starts."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def test_three_hundred_strangers_cost_a_paused_agent_nothing_and_the_token_still_gets_in(tmp_path):
    agent = Listening(
        HERE / "ready_chain.py", tmp_path, env={"GRADTUI_HANDSHAKE_TIMEOUT": "0.5"}, preexec_fn=low_fd_limit
    )
    try:
        address = agent.wait_listening()
        agent.wait_stdout(b"ready")
        time.sleep(1.0)  # the backward has reached its first pause, waiting for a client
        before = rss(agent.process.pid)
        host, port = address.rsplit(":", 1)
        attack = subprocess.run(
            [sys.executable, str(HERE / "strangers.py"), host, port, str(CONNECTIONS), str(ATTACK_SECONDS)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert attack.returncode == 0, attack.stderr
        stats = json.loads(attack.stdout)
        assert stats["opened"] == CONNECTIONS and stats["closed_by_agent"] > 0, stats
        assert agent.process.poll() is None
        after = rss(agent.process.pid)
        assert after - before < RSS_SLACK, (before, after)

        token = json.loads(next(tmp_path.iterdir()).read_text())["token"]
        client = RawClient(address, token, time.monotonic() + ATTACH_WAIT)
        first = client.until(ev.Paused)
        client.submit("step", 1)
        second = client.until(ev.Paused, 2)
        assert (first.node, second.node) == (0, 1), (first, second)
        client.send(frames.Quit())
        client.sock.close()
        agent.wait()
        out, err = agent.output()
        told = "".join(e.text for e in client.events if isinstance(e, ev.Output))
        for text in (out.decode(errors="replace"), err.decode(errors="replace"), told):
            assert "Traceback" not in text and "RecursionError" not in text, text
    finally:
        agent.close()
