"""A recording as the headless JSON report (DESIGN.md's shape), streamed a pass at a time.

`to_json(db, path)` reads the recording with `reader.Recording` and writes it with the same
`JsonStream` the live `--report` uses, so both have one shape: compact, strict JSON
(non-finite numbers spelled as strings), passes without per-node data with `"nodes": []`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gradtui.model.report import JsonStream
from gradtui.model.stats import Stats, json_float
from gradtui.record.reader import NodeStats, PassInfo, Recording


def _stats(items: tuple[Stats | None, ...] | None) -> list[dict[str, Any] | None] | None:
    return None if items is None else [None if s is None else s.to_json() for s in items]


def pass_json(recording: Recording, info: PassInfo) -> dict[str, Any]:
    """One pass of the report, from the recording."""
    nodes = []
    if info.per_node:
        graph = recording.graph(info.index)
        stats = recording.stats(info.index)
        for i, data in graph.nodes(data=True):
            ran: NodeStats | None = stats.get(i)
            nodes.append({"id": i, "name": data["name"], "kind": data["kind"], "labels": list(data["labels"]),
                          "param": data["param"], "source": data["source"], "module": data["module"],
                          "order": data["order"], "next": list(data["next"]),
                          "grad_outputs": _stats(ran.grad_outputs) if ran else None,
                          "grad_inputs": _stats(ran.grad_inputs) if ran else None})
    flow = [{"name": r.name, "node": r.node, "shape": list(r.shape), "grad_norm": json_float(r.grad_norm),
             "weight_norm": json_float(r.weight_norm), "ratio": json_float(r.ratio), "nonfinite": r.nonfinite}
            for r in recording.flow(info.index)]
    return {"index": info.index, "call": info.call, "call_text": info.call_text, "call_site": info.call_site,
            "recorded": info.hooked, "losses": [json_float(v) for v in info.losses], "nodes": nodes,
            "error": info.error, "flow": flow, "nested": list(info.nested)}


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
        tail = {"script": run.script, "exit_status": run.exit_status, "error": error,
                "breakpoint_hits": recording.hits(), "edits": recording.edits()}
        stream = JsonStream(path)
        for info in recording.passes():
            stream.add_pass(pass_json(recording, info), tail)
        stream.close(tail)
        return Exported(stream.failed, tuple(recording.damage))


def to_json(db: str, path: str) -> str | None:
    """`export_json`, returning only why writing failed, or None."""
    return export_json(db, path).failed
