"""An attached UI whose terminal froze costs the agent bounded memory and cannot keep it alive.

`gradtui --listen` runs a script of 20,000 hooked passes (each prints a line); `gradtui attach`
runs in a tmux pane, arms `break nan` (every pass hooked) and continues. Then the pane's tmux
server is stopped (SIGSTOP, as a dropped SSH session leaves a terminal): the UI's writes to its
terminal block, it stops reading the agent's events, and the agent must neither queue them
without bound nor wait for that client at the end. The terminal stays frozen for at least 60
seconds and until the agent has ended: the agent's resident memory stays within 100 MB of what
it was before `continue`, and it ends within 10 seconds of the script's last line. Then the
server is let go on (SIGCONT): the UI shows how the script ended as far as it knows, and `q`
leaves it with the terminal given back.

(tests/agent/test_stalled_client.py holds the same with a raw socket client that stops reading.)
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.processes import PROCESS_TIMEOUT, Listening, Terminal, gradtui_command, rss

pytestmark = pytest.mark.timeout(900)

HERE = REPO / "tests" / "fixtures" / "agent"
PASSES = 20000
FROZEN = 60.0
"""Seconds the terminal stays frozen at least (the acceptance's 60 s)."""
RSS_SLACK = 100 * 1024 * 1024
END_WAIT = 10.0
"""Seconds the agent may take to end after the script's last line."""
THAW = 240.0
"""Seconds the thawed UI may take to show what its socket already held (~85 s measured)."""
RUN_LIMIT = 480.0
"""Seconds the script's 20,000 passes may take on a loaded machine."""


def resident(pid: int) -> int:
    """The process's resident memory in bytes; 0 once it has ended (a zombie has none)."""
    try:
        return rss(pid)
    except (StopIteration, OSError):
        return 0


def passes_printed(out: bytes) -> int:
    """The highest `pass N` the script has printed (-1: none)."""
    return max((int(n) for n in re.findall(rb"(?m)^pass (\d+)$", out)), default=-1)


def test_a_frozen_terminal_costs_bounded_memory_and_the_agent_ends_with_the_script(tmp_path: Path):
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    agent = Listening(HERE / "many_passes.py", runtime, "127.0.0.1:0", str(PASSES))
    term: Terminal | None = None
    stopped: int | None = None
    try:
        agent.wait_listening()
        agent.wait_stdout(b"ready")
        term = Terminal(
            [*gradtui_command(), "attach"],
            tmp_path,
            100,
            30,
            env={"PYTHONPATH": str(REPO), "GRADTUI_RUNTIME_DIR": str(runtime)},
        )
        term.wait(lambda s: re.search(r"paused (at )?#0\b", s), "the first pause, attached", PROCESS_TIMEOUT)
        term.keys(":")
        term.text("break nan")
        term.keys("Enter")
        term.wait(lambda s: "breakpoint 1" in s, "the breakpoint set")
        before = rss(agent.process.pid)
        term.keys("c")
        deadline = time.monotonic() + PROCESS_TIMEOUT
        while passes_printed(agent.output()[0]) < 10:  # the UI let the script run on
            assert time.monotonic() < deadline and agent.process.poll() is None, agent.output()
            time.sleep(0.1)
        stopped = term.server_pid()
        os.kill(stopped, signal.SIGSTOP)
        frozen_at = time.monotonic()
        peak, last_line_at = before, None
        while agent.process.poll() is None:
            out, _ = agent.output()  # drains the agent's stdout pipe (the script's lines)
            peak = max(peak, resident(agent.process.pid))
            assert peak - before < RSS_SLACK, f"the agent grew {before >> 20} -> {peak >> 20} MB"
            if last_line_at is None and out.endswith(b"\ndone\n"):
                last_line_at = time.monotonic()
            if last_line_at is not None:
                assert time.monotonic() - last_line_at < END_WAIT, (
                    f"the agent still runs {END_WAIT}s after the script's last line: {agent.output()[1][-2000:]!r}"
                )
            assert time.monotonic() - frozen_at < RUN_LIMIT, f"the script never finished ({passes_printed(out)})"
            time.sleep(0.2)
        out, err = agent.output()
        print(
            f"agent RSS {before >> 20} -> peak {peak >> 20} MB; ended {time.monotonic() - (last_line_at or 0):.1f}s after the last line"
        )
        assert agent.process.returncode == 0, err
        assert out.endswith(b"\ndone\n") and passes_printed(out) == PASSES - 1, out[-200:]
        assert b"Traceback" not in err, err
        while time.monotonic() - frozen_at < FROZEN:  # frozen for the acceptance's 60 s at least
            time.sleep(0.5)
        # Thawed: the UI shows what was on its way, then the end as it knows it (the goodbye got
        # through: the script's status; it did not: the connection ended untold, not a success).
        os.kill(stopped, signal.SIGCONT)
        stopped = None
        screen = term.wait(lambda s: "is lost to this UI" in s or "exited with status 0" in s, "the end, thawed", THAW)
        term.keys("q")
        term.assert_clean_exit(0 if "exited with status 0" in screen else 1)
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        if term is not None:
            term.close()
        agent.close()
