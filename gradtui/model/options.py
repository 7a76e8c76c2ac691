"""One wiring place: what a run asks for (`RunOptions`) and the one builder of its session.

Every way of running gradtui (headless, the UI's child agent, `--listen`, `gradtui.listen()`)
describes its run as a `RunOptions` and builds its session with `build_session`, so none of
them re-derives which statistics to keep or which passes to hook.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

ENV = "GRADTUI_AGENT_OPTIONS"
"""The environment variable a child agent reads its RunOptions from (JSON)."""


@dataclass
class RunOptions:
    """What one run of gradtui asks for."""

    script: str
    """Absolute path of the script (gradtui.listen(): the calling program, for display)."""
    args: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    """-c / -x commands, fed one per pause (by whichever client runs them)."""
    report: str | None = None
    """--report PATH: a JSON report of every pass."""
    record_all: bool = False
    """Hook every pass, even one nothing can stop in."""
    headless: bool = False
    listen: str | None = None
    """--listen [HOST:]PORT: serve clients over TCP."""
    record: str | None = None
    """--record DB: a SQLite recording of the run."""
    record_every: int | None = None
    """--record-every N: per-node data of every N-th pass (every pass is hooked)."""
    flight: int | None = None
    """--flight K: per-node data of the last K passes, written when something goes wrong."""
    fingerprints: bool = False
    """--fingerprints: with --record, a fingerprint of every recorded value (for `gradtui diff`)."""
    against: str | None = None
    """--against REF.db: compare each hooked pass with the reference's pass of the same index
    (`break differs>R`; fingerprints on)."""
    every_stat: bool = False
    """Every statistic of every gradient even between pauses (a client-side report wants them)."""
    break_on: list[str] = field(default_factory=list)
    """Breakpoints armed before the first pass; with any, the run starts in `continue`."""

    @property
    def every_pass(self) -> bool:
        """A recording wants per-node data of passes nothing would stop in (--record-every, --flight)."""
        return self.record is not None and (self.record_every is not None or self.flight is not None)

    @property
    def full_stats(self) -> bool:
        """Every statistic of every gradient (headless prints them, a report writes them); the
        UI between pauses needs only norms and non-finite counts, and so does a recording of
        every pass (light statistics keep it near plain speed)."""
        if self.report is not None or self.every_stat:
            return True
        if self.every_pass:
            return self.record_all
        return self.headless

    @property
    def hook_all_passes(self) -> bool:
        """Record every pass node by node (a report or a recording of every pass wants them)."""
        return self.record_all or self.every_stat or self.report is not None or self.every_pass

    @property
    def flow_unhooked(self) -> bool:
        """Compute the gradient flow of passes that run unhooked: always for a client that shows
        it or a recording; headless only if a `flow` command may ask for it."""
        return (not self.headless or self.record is not None
                or any(c.split()[:1] == ["flow"] for c in self.commands))

    def to_env(self) -> dict[str, str]:
        """The environment entry that hands these options to a child agent."""
        return {ENV: json.dumps(dataclasses.asdict(self))}

    @classmethod
    def from_env(cls) -> "RunOptions":
        """The options a parent handed to this child agent."""
        data: dict[str, Any] = json.loads(os.environ.pop(ENV))
        return cls(**data)
