"""Which agent a browser tab attaches to: the one named on the command line, or the agent whose
runtime file is the newest when the tab opens (a script restarted between two tabs is found).

Only the runtime files are read here (no torch import: `gradtui serve` starts in a blink).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from gradtui.wire.runtime import AgentEntry, running_agents, runtime_dir


@dataclass(frozen=True)
class AgentChoice:
    """The agent a tab is to attach to: its address as `gradtui attach` takes it, and what is
    known of it (nothing but the address when it has no runtime file here)."""

    address: str
    script: str = ""
    pid: int | None = None


def _mtime(entry: AgentEntry) -> int:
    # the file name runtime.write_entry gives an agent's runtime file
    try:
        return os.stat(os.path.join(runtime_dir(), f"agent-{entry.pid}.json")).st_mtime_ns
    except OSError:
        return 0


def newest_agent() -> AgentChoice | None:
    """The running agent whose runtime file was written last (None: no agent is running)."""
    entry = max(running_agents(), key=lambda e: (_mtime(e), e.pid), default=None)
    return None if entry is None else AgentChoice(entry.address, entry.script, entry.pid)


def choose(address: str | None) -> AgentChoice | None:
    """The agent at `address` (as given: `gradtui attach` resolves it and finds its token), or
    the newest one when no address was given; None when there is none to choose."""
    if address is None:
        return newest_agent()
    for entry in running_agents():
        if entry.address == address:
            return AgentChoice(entry.address, entry.script, entry.pid)
    return AgentChoice(address)
