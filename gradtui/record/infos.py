"""What a recording's rows read as: the run, a pass, a span of passes, a pass's figures for the
plots, a node (its NodeInfo, as a live capture's), a node's statistics, an output line; plain
data, each row checked as it is decoded (gradtui.record.rows). The reader
(gradtui.record.reader) answers with these."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, NamedTuple

from gradtui.protocol.nodes import NodeInfo
from gradtui.protocol.stats import Stats
from gradtui.record import rows


@dataclass(frozen=True, slots=True)
class RunInfo:
    """The run: what was run, with what, and how it ended (None while it was still running)."""

    script: str | None
    argv: tuple[str, ...]
    torch: str | None
    python: str | None
    started: float | None
    finished: float | None
    exit_status: int | None
    error: str | None
    quit: bool
    how: str | None
    per_node: str | None
    """Which passes have per-node data: "hooked", "every N" or "flight K"."""


@dataclass(frozen=True, slots=True)
class PassInfo:
    """One pass as recorded (always: loss, flow summary, timing; per-node data if `per_node`)."""

    index: int
    call: str
    call_text: str
    call_site: str
    losses: tuple[float | None, ...]
    hooked: bool
    per_node: bool
    nodes: int
    done: int
    error: str | None
    failed_node: int | None
    started: float
    """Seconds after the run started."""
    wall: float
    grad_norm: float | None
    """The global gradient norm over the flow's leaves."""
    nonfinite: int
    nested: tuple[dict[str, Any], ...]


PASS_COLUMNS = (  # the `passes` columns pass_info_of reads, in its order
    "idx, call, call_text, call_site, losses, hooked, per_node, nodes, done, error, failed_node, "
    "started, wall, grad_norm, nonfinite, nested"
)


def pass_info_of(r: tuple) -> PassInfo:
    """A `passes` row, checked (raises BadRow)."""
    return PassInfo(
        rows.integer(r[0], "idx"),
        rows.text(r[1], "call", False),
        rows.text(r[2], "call_text", False),
        rows.text(r[3], "call_site", False),
        rows.losses(r[4]),
        bool(rows.integer(r[5], "hooked")),
        bool(rows.integer(r[6], "per_node")),
        rows.integer(r[7], "nodes"),
        rows.integer(r[8], "done"),
        rows.text(r[9], "error"),
        rows.integer(r[10], "failed_node", null=True),
        rows.real(r[11], "started", null=False),
        rows.real(r[12], "wall", null=False),
        rows.real(r[13], "grad_norm"),
        rows.integer(r[14], "nonfinite", null=True) or 0,
        rows.nested(r[15]),
    )


class PassSpan(NamedTuple):
    """The first and last index of a recording's passes (None: no pass ended)."""

    first: int | None
    last: int | None

    @property
    def count(self) -> int:  # type: ignore[override]  # a NamedTuple's property named as tuple's method
        """Passes in the span: those that ended (a pass ends or the run does; the session
        numbers them from 0 on)."""
        return 0 if self.first is None or self.last is None else self.last - self.first + 1


@dataclass(frozen=True, slots=True)
class PassFigures:
    """What the plots over passes need of one pass: its losses, global gradient norm,
    non-finite leaves and each leaf's gradient norm, and when it started (the wall-time axis)."""

    index: int
    losses: tuple[float | None, ...]
    grad_norm: float | None
    nonfinite: int
    norms: tuple[tuple[str, float | None], ...]
    started: float | None = None
    """Seconds after the run started."""


@dataclass(frozen=True, slots=True)
class NodeStats:
    """What flowed into a node (`grad_outputs`) and what it sent on (`grad_inputs`), per slot."""

    grad_outputs: tuple[Stats | None, ...]
    grad_inputs: tuple[Stats | None, ...]


@dataclass(frozen=True, slots=True)
class OutputLine:
    """Text the script wrote, after pass `pass_index` had started (None: before the first)."""

    pass_index: int | None
    stream: str
    text: str


class OutputStory(NamedTuple):
    """The output lines a replay tells (see `Recording.output_story`)."""

    before: list[OutputLine]
    """Lines written before the first pass started."""
    earlier: list[OutputLine]
    """The last lines of the passes not listed."""
    told: list[OutputLine]
    """The last lines of the listed passes (and of any later pass that never ended)."""


class NodeRow(NamedTuple):
    """A recorded node: its id, its NodeInfo and where it ran in its pass (`order`, None: it did
    not run)."""

    id: int
    info: NodeInfo
    order: int | None


NODE_COLUMNS = "id, op, kind, labels, param, source, module, ord, next, seq"
"""The `nodes` columns node_row_of reads, in its order."""


def node_row_of(row: tuple, folder: str | None) -> NodeRow:
    """A `nodes` row, checked (raises BadRow). A recording keeps a node's `source` ("file.py:LINE")
    and no saved values; its `path` and `line` are the source's, the file relative to the
    script's `folder` (None: left unknown)."""
    i, op, kind, tags, param, source, module, order, nxt, seq = row
    seq = rows.integer(seq, "seq", null=True)
    source = rows.text(source, "source")
    file, _, line = (source or "").rpartition(":")
    number = (
        folder is not None and bool(source) and line.isascii() and line.isdigit()
    )  # int() refuses '²', isdigit does not
    info = NodeInfo(
        rows.text(op, "op", False),
        rows.text(kind, "kind"),  # type: ignore[arg-type]
        None if seq is None else seq + (1 << 64) if seq < 0 else seq,
        rows.next_ids(nxt),
        rows.labels(tags),
        rows.text(param, "param"),
        source,
        os.path.join(folder, file) if number else None,  # type: ignore[arg-type]
        int(line) if number else None,
        rows.text(module, "module"),
    )
    return NodeRow(rows.integer(i, "id"), info, rows.integer(order, "ord", null=True))


def run_info_of(row: tuple) -> RunInfo:
    """The `run` row, checked (raises BadRow)."""
    script, argv, torch, python, started, finished, status, error, quit, how, per_node = row
    return RunInfo(
        rows.text(script, "script"),
        rows.json_list(argv or "[]", "argv", lambda x: type(x) is str),
        rows.text(torch, "torch"),
        rows.text(python, "python"),
        rows.real(started, "started"),
        rows.real(finished, "finished"),
        rows.integer(status, "exit_status", null=True),
        rows.text(error, "error"),
        bool(rows.integer(quit, "quit", null=True)),
        rows.text(how, "how"),
        rows.text(per_node, "per_node"),
    )
