"""A client that stops reading costs the agent bounded memory, and cannot keep it alive.

An attached client on a raw socket shows the token, arms `break nan` (every pass hooked), sends
`continue` and then reads nothing while the script runs 20,000 backward passes (a frozen
terminal, a dropped SSH session). What the client cannot take is coalesced, not queued: the
agent's memory stays within 100 MB of where it was at the first pause, and when the script's
last line is written the agent ends (its goodbye to a client that reads nothing has a deadline).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from gradtui.protocol import events as ev
from tests.processes import PROCESS_TIMEOUT, Listening, RawClient, rss

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "agent"
PASSES = 20000
RSS_SLACK = 100 * 1024 * 1024
END_WAIT = 10.0
"""Seconds the agent may take to end after the script's last line (the acceptance bound)."""


def test_a_client_that_stops_reading_costs_bounded_memory_and_the_agent_ends_with_the_script(tmp_path):
    agent = Listening(HERE / "many_passes.py", tmp_path, "127.0.0.1:0", str(PASSES))
    try:
        address = agent.wait_listening()
        agent.wait_stdout(b"ready")
        token = json.loads(next(tmp_path.iterdir()).read_text())["token"]
        client = RawClient(address, token, time.monotonic() + PROCESS_TIMEOUT)
        client.until(ev.Paused)  # the first pass waits at its first node for us
        client.submit("break nan", 1)
        client.until(ev.CommandResult)
        before = rss(agent.process.pid)
        client.submit("continue", 2)
        stalled = time.monotonic()  # from here on the client reads nothing
        peak = before
        while True:
            out, _ = agent.output()  # drain the agent's own stdout pipe (the script's lines)
            peak = max(peak, rss(agent.process.pid))
            assert peak - before < RSS_SLACK, f"the agent grew {before >> 20} -> {peak >> 20} MB"
            if b"\ndone\n" in out:
                break
            assert agent.process.poll() is None, agent.output()
            assert time.monotonic() - stalled < 30 * PROCESS_TIMEOUT, "the script never finished"
            time.sleep(0.25)
        agent.wait(END_WAIT)  # subprocess.TimeoutExpired: the stalled client kept the agent alive
        out, err = agent.output()
        assert agent.process.returncode == 0, err
        assert out.count(b"\npass ") + out.startswith(b"pass ") >= PASSES - 1, out[-200:]
        client.sock.close()
    finally:
        agent.close()
