"""The headless JSON report (DESIGN.md), built only from events.

`Report` is a listener: add it to a session and it keeps plain data about every pass,
breakpoint hit and edit; `to_json()` gives the report object at any time, so a script that
fails half-way still gets a report of the passes it made.
"""

from __future__ import annotations

import json
from typing import Any

from gradtui.core import events as ev
from gradtui.core.summary import Stats, json_float


def flow_json(flow: tuple[ev.ParamFlow, ...]) -> list[dict[str, Any]]:
    """The report's gradient flow rows (non-finite norms spelled as strings)."""
    return [{"name": r.name, "node": r.node, "shape": list(r.shape), "grad_norm": json_float(r.grad_norm),
             "weight_norm": json_float(r.weight_norm), "ratio": json_float(r.ratio), "nonfinite": r.nonfinite}
            for r in flow]


def _stats(items: tuple[Stats | None, ...]) -> list[dict[str, Any] | None]:
    return [None if s is None else s.to_json() for s in items]


class Report:
    """Collects the report of a run from the events of its session and runner."""

    def __init__(self) -> None:
        self.script: str | None = None
        self.exit_status: int | None = None
        self.error: str | None = None
        self.passes: list[dict[str, Any]] = []
        self.breakpoint_hits: list[dict[str, Any]] = []
        self.edits: list[dict[str, Any]] = []
        self._nodes: dict[int, dict[str, Any]] = {}

    def __call__(self, event: ev.Event) -> None:
        """Listener entry point."""
        if isinstance(event, ev.NodeRan):
            node = self._nodes[event.node]
            node["order"] = event.order
            node["grad_outputs"] = _stats(event.grad_outputs)
            node["grad_inputs"] = _stats(event.grad_inputs)
        elif isinstance(event, ev.PassStarted):
            graph = event.graph
            self._nodes = {}
            nodes = []
            for i, data in graph.nodes(data=True):
                node = {
                    "id": i, "name": data["name"], "kind": data["kind"], "labels": list(data["labels"]),
                    "param": data["param"], "source": data["source"], "module": data["module"],
                    "order": None,
                    "next": list(data["next"]),
                    "grad_outputs": None, "grad_inputs": None,
                }
                self._nodes[i] = node
                nodes.append(node)
            self.passes.append({"index": event.index, "call": event.call, "call_text": event.call_text,
                                "call_site": event.call_site, "recorded": event.recorded,
                                "losses": [json_float(v) for v in event.losses], "nodes": nodes,
                                "error": None, "flow": [], "nested": []})
        elif isinstance(event, ev.PassFinished):
            if self.passes:
                self.passes[-1]["error"] = event.error
                self.passes[-1]["flow"] = flow_json(event.flow)
        elif isinstance(event, ev.NestedPass):
            if self.passes and self.passes[-1]["index"] == event.pass_index:
                self.passes[-1]["nested"].append({"call": event.call, "call_site": event.call_site,
                                                  "nodes": event.nodes, "thread": event.thread})
        elif isinstance(event, ev.BreakpointHit):
            self.breakpoint_hits.append({"breakpoint": event.number, "spec": event.spec,
                                         "pass": event.pass_index, "node": event.node})
        elif isinstance(event, ev.GradEdited):
            self.edits.append({"pass": event.pass_index, "node": event.node, "command": event.command,
                               "before": _stats(event.before), "after": _stats(event.after)})
        elif isinstance(event, ev.ScriptStarted):
            self.script = event.path
        elif isinstance(event, ev.ScriptFinished):
            self.exit_status = event.exit_status
            self.error = event.traceback
            if event.quit:
                self.error = "quit"

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        return {"script": self.script, "exit_status": self.exit_status, "error": self.error,
                "passes": self.passes, "breakpoint_hits": self.breakpoint_hits, "edits": self.edits}

    def write(self, path: str) -> None:
        """Write the report as JSON to `path`."""
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(self.to_json(), handle, indent=1)
            handle.write("\n")
