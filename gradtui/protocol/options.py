"""What a run asks for (`RunOptions`), checked in one place (`RunOptions.validate`).

Every way of running gradtui (headless, the UI's child agent, `--listen`, `gradtui.listen()`)
describes its run as a `RunOptions`, validates it here and builds its agent with
`gradtui.agent.build.build_agent`, so none of them re-derives which statistics to keep, which
passes to hook, or which combinations of options make sense.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import msgspec

from gradtui.protocol.commands import asks_flow

ENV = "GRADTUI_AGENT_OPTIONS"
"""The environment variable a child agent reads its RunOptions from (JSON)."""


class OptionsError(ValueError):
    """Options that do not make sense together, or a path that cannot be used; one line for the user."""


class PathChecks(msgspec.Struct, frozen=True):
    """What `RunOptions.validate` asks of the layers that know the files (the recording's format
    is gradtui.record's): each says why a path cannot be used, or None."""

    recording: Callable[[str], str | None]
    """Why a run cannot be recorded to this path."""
    reference: Callable[[str], str | None]
    """Why this path cannot be compared against (`--against`)."""


class RunOptions(msgspec.Struct):
    """What one run of gradtui asks for."""

    script: str
    """Absolute path of the script (gradtui.listen(): the calling program, for display); with
    `module`, the module's name."""
    args: list[str] = msgspec.field(default_factory=list)
    commands: list[str] = msgspec.field(default_factory=list)
    """-c / -x commands, fed one per pause (by whichever client runs them; parsed there, once)."""
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
    break_on: list[str] = msgspec.field(default_factory=list)
    """Breakpoints armed before the first pass; with any, the run starts in `continue`."""
    module: bool = False
    """`-m`: `script` names a module, run as `python -m script args` runs it."""

    @property
    def every_pass(self) -> bool:
        """A recording wants per-node data of passes nothing would stop in (--record-every, --flight)."""
        return self.record is not None and (self.record_every is not None or self.flight is not None)

    @property
    def full_stats(self) -> bool:
        """Every statistic of every gradient between pauses (min, max, mean besides the norm and the
        non-finite count): a report writes them, a recording of every pass with --record-all keeps
        them, and so does a headless run's recording, as it always has. Nothing else reads them: a
        pause's gradients (the UI's detail pane, headless's lines, `print`) are summarised in full
        when it pauses, and a watch (`nan`, `norm>X`) reads the norm and the non-finite count. A
        headless run that only prints its pauses computes the light statistics, as the UI does."""
        if self.report is not None or self.every_stat:
            return True
        if self.every_pass:
            return self.record_all
        return self.headless and self.record is not None

    @property
    def hook_all_passes(self) -> bool:
        """Record every pass node by node (a report or a recording of every pass wants them)."""
        return self.record_all or self.every_stat or self.report is not None or self.every_pass

    @property
    def flow_unhooked(self) -> bool:
        """Compute the gradient flow of passes that run unhooked: always for a client that shows
        it or a recording; headless only if one of its `commands` is a `flow`."""
        return not self.headless or self.record is not None or asks_flow(self.commands)

    def validate(self, checks: PathChecks, *, keywords: bool = False) -> RunOptions:
        """These options with their paths made absolute (the script may chdir), or OptionsError
        saying, in one line, the first thing wrong with them (asked before the script runs).

        `keywords`: name the options as `gradtui.listen()`'s keyword arguments, not as flags."""
        name = _keyword if keywords else _flag
        if self.record is None and (self.record_every or self.flight):
            raise OptionsError(f"{name('record_every')} and {name('flight')} need {name('record')}")
        if self.record is None and self.fingerprints:
            raise OptionsError(f"{name('fingerprints')} needs {name('record')}")
        if self.record_every and self.flight:
            raise OptionsError(f"use either {name('record_every')} or {name('flight')}, not both")
        if self.headless and self.listen:
            raise OptionsError(
                "--headless and --listen do not go together: an agent that --listens serves "
                "clients; run `gradtui attach --headless -c ...` against it"
            )
        report = _absolute(self.report)
        if self.report is not None and (problem := _unwritable(self.report)):
            raise OptionsError(f"cannot write {name('report')} {self.report}: {problem}")
        against = _absolute(self.against)
        if against is not None and (problem := checks.reference(against)):
            raise OptionsError(f"against={problem}" if keywords else f"--against {problem}")
        record = _absolute(self.record)
        if record is not None:  # (None just when self.record is)
            problem = (
                "empty path"
                if self.record == ""
                else f"it is the {name('report')} path"
                if record == report
                else checks.recording(record)
            )
            if problem:
                raise OptionsError(f"cannot record to {self.record}: {problem}")
        return msgspec.structs.replace(self, report=report, record=record, against=against)

    def to_env(self) -> dict[str, str]:
        """The environment entry that hands these options to a child agent."""
        return {ENV: json.dumps(msgspec.structs.asdict(self))}

    @classmethod
    def from_env(cls) -> RunOptions:
        """The options a parent handed to this child agent."""
        data: dict[str, Any] = json.loads(os.environ.pop(ENV))
        return cls(**data)


def _flag(name: str) -> str:
    """An option as the command line spells it (`--record DB`)."""
    flag = "--" + name.replace("_", "-")
    return f"{flag} DB" if name == "record" else flag


def _keyword(name: str) -> str:
    """An option as `gradtui.listen()` spells it (`record=PATH`)."""
    return f"{name}=PATH" if name == "record" else name


def _absolute(path: str | None) -> str | None:
    """`path` made absolute, keeping None and the empty path (which is refused, not the cwd)."""
    return os.path.abspath(path) if path else path


def _unwritable(given: str) -> str | None:
    """Why the report could not be written to `given` (asked before the script runs), or None.
    A missing folder is created."""
    if given == "":
        return "empty path"
    path = os.path.abspath(given)
    folder = os.path.dirname(path)
    if os.path.isdir(path):
        return "it is a directory"
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        return f"cannot create the folder {folder}: {exc.strerror}"
    if not os.access(path if os.path.exists(path) else folder, os.W_OK):
        return "permission denied"
    return None
