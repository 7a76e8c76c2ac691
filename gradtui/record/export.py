"""A recording as the headless JSON report (docs/recording.md's shape), streamed a pass at a time.

`to_json(db, path)` reads the recording with `reader.Recording` and writes it with the same
`JsonStream` the live `--report` uses, so both have one shape: compact, strict JSON
(non-finite numbers spelled as strings), passes without per-node data with `"nodes": []`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gradtui.protocol import report
from gradtui.protocol.nodes import INFO
from gradtui.protocol.report import JsonStream
from gradtui.record.ending import UNKNOWN_END
from gradtui.record.reader import NodeStats, PassInfo, Recording


def pass_json(recording: Recording, info: PassInfo) -> dict[str, Any]:
    """One pass of the report, from the recording (the shape is gradtui.protocol.report's)."""
    nodes = []
    if info.per_node:
        stats = recording.stats(info.index)
        graph = recording.graph(info.index)
        for i, data in graph.nodes(data=True):
            ran: NodeStats | None = stats.get(i)
            nodes.append(
                report.node_json(
                    i, data[INFO], data["order"], ran.grad_outputs if ran else None, ran.grad_inputs if ran else None
                )
            )
    return report.pass_json(
        index=info.index,
        call=info.call,
        call_text=info.call_text,
        call_site=info.call_site,
        recorded=info.hooked,
        losses=info.losses,
        nodes=nodes,
        error=info.error,
        flow=report.flow_json(recording.flow(info.index)),
        nested=list(info.nested),
    )


@dataclass(frozen=True, slots=True)
class Exported:
    """How an export went: why writing failed (None: it did not), and what of the recording was
    found damaged and left out (`reader.Recording.damage`; the document is still valid)."""

    failed: str | None
    damage: tuple[str, ...]


def export_json(db: str, path: str) -> Exported:
    """Write recording `db` to `path` as the JSON report: what was readable of it.

    Raises schema.NotARecording for a file that is not a recording, OSError if `path` cannot
    be opened.
    """
    with Recording(db) as recording:
        run = recording.run()
        error = "quit" if run.quit else run.error
        how = UNKNOWN_END if run.finished is None or run.exit_status is None else run.how
        tail = {
            "script": run.script,
            "exit_status": run.exit_status,
            "how": how,
            "error": error,
            "breakpoint_hits": recording.hits(),
            "edits": recording.edits(),
        }
        stream = JsonStream(path)
        for info in recording.passes():
            stream.add_pass(pass_json(recording, info), tail)
        stream.close(tail)
        return Exported(stream.failed, tuple(recording.damage))


def to_json(db: str, path: str) -> str | None:
    """`export_json`, returning only why writing failed, or None."""
    return export_json(db, path).failed
