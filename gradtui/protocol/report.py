"""The headless JSON report (its shape: docs/recording.md), built only from events.

`Report` is a listener: add it to a session and it keeps plain data about every pass,
breakpoint hit and edit; `to_json()` gives the report object at any time, so a script that
fails half-way still gets a report of the passes it made. Given a `JsonStream`, it instead
writes each pass to the file as the pass ends and forgets it: the file is a complete JSON
document after every pass, so a crash or a signal loses at most the pass in flight.
"""

from __future__ import annotations

import json
import os
from typing import Any, BinaryIO

from gradtui.protocol import events as ev
from gradtui.protocol.nodes import INFO, NodeInfo
from gradtui.protocol.stats import Stats, json_float


def flow_json(flow) -> list[dict[str, Any]]:
    """The report's gradient flow rows (non-finite norms spelled as strings), from `ParamFlow`s or
    any rows with the same fields (a recording's)."""
    return [
        {
            "name": r.name,
            "node": r.node,
            "shape": list(r.shape),
            "grad_norm": json_float(r.grad_norm),
            "weight_norm": json_float(r.weight_norm),
            "ratio": json_float(r.ratio),
            "nonfinite": r.nonfinite,
        }
        for r in flow
    ]


def stats_json(items: tuple[Stats | None, ...] | None) -> list[dict[str, Any] | None] | None:
    """A node's gradient slots as the report writes them (None: the node did not run)."""
    return None if items is None else [None if s is None else s.to_json() for s in items]


def node_json(
    node: int,
    info: NodeInfo,
    order: int | None = None,
    grad_outputs: tuple[Stats | None, ...] | None = None,
    grad_inputs: tuple[Stats | None, ...] | None = None,
) -> dict[str, Any]:
    """One node of a pass in the report, from its NodeInfo and what it received/sent."""
    return {
        "id": node,
        "name": info.name,
        "kind": info.kind,
        "labels": list(info.labels),
        "param": info.param,
        "source": info.source,
        "module": info.module,
        "order": order,
        "next": list(info.next),
        "grad_outputs": stats_json(grad_outputs),
        "grad_inputs": stats_json(grad_inputs),
    }


def pass_json(
    *,
    index: int,
    call: str,
    call_text: str,
    call_site: str | None,
    recorded: bool,
    losses: tuple[float | None, ...],
    nodes: list[dict[str, Any]],
    error: str | None = None,
    flow: list[dict[str, Any]] | None = None,
    nested: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One pass of the report: the one writer of its shape, for the live report and the export."""
    return {
        "index": index,
        "call": call,
        "call_text": call_text,
        "call_site": call_site,
        "recorded": recorded,
        "losses": [json_float(v) for v in losses],
        "nodes": nodes,
        "error": error,
        "flow": flow or [],
        "nested": nested or [],
    }


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class JsonStream:
    """Writes the report to `path` as one compact JSON document that grows a pass at a time.

    The file holds `{"passes":[P0,P1,...],TAIL}`: each pass is written over the old tail, then
    the tail (script, exit status, error, hits, edits) again, so after every write the file is
    a valid document. A file that cannot seek (a pipe, a device) gets the whole document at
    `close`. Opening raises OSError; a later write error is kept in `failed` (one line) and
    nothing more is written.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.failed: str | None = None
        # Read back too: a file whose folder was removed during the run is copied from here.
        plain = not os.path.exists(path) or os.path.isfile(path)
        self._file: BinaryIO | None = open(path, "w+b" if plain else "wb")  # noqa: SIM115 - kept open for the run
        self._regular = os.path.isfile(path)
        self._inode = os.fstat(self._file.fileno()).st_ino
        self._held: list[bytes] = []
        """Passes of a file that cannot seek, written at close."""
        self._end = 0
        self._count = 0
        self._tail: dict[str, Any] = {
            "script": None,
            "exit_status": None,
            "how": None,
            "error": None,
            "breakpoint_hits": [],
            "edits": [],
        }
        if self._regular:
            self._put(b'{"passes":[')
            self._end = self._file.tell()
            self._put_tail()
            if self.failed:
                raise OSError(self.failed)

    def _put(self, data: bytes) -> None:
        if self._file is None:
            return
        try:
            self._file.write(data)
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        self.failed = exc.strerror or str(exc)
        handle, self._file = self._file, None
        try:
            if handle is not None:
                handle.close()
        except OSError:
            pass

    def _put_tail(self) -> None:
        if self._file is None:
            return
        self._put(b"]," + _dumps(self._tail)[1:])
        try:
            if self._file is not None:
                self._file.truncate()
                self._file.flush()
        except OSError as exc:
            self._fail(exc)

    def add_pass(self, data: dict[str, Any], tail: dict[str, Any]) -> None:
        """Append one pass and rewrite the tail with `tail` (keys of the report's top level)."""
        self._tail.update(tail)
        text = (b"," if self._count else b"") + _dumps(data)
        self._count += 1
        if not self._regular:
            self._held.append(text)
            return
        if self._file is None:
            return
        try:
            self._file.seek(self._end)
        except OSError as exc:
            self._fail(exc)
            return
        self._put(text)
        self._end += len(text)
        self._put_tail()

    def close(self, tail: dict[str, Any]) -> None:
        """Write the final tail (and everything, for a file that cannot seek) and close."""
        self._tail.update(tail)
        if self._file is None:
            return
        if self._regular:
            if self._file is not None:
                self._file.seek(self._end)
            self._put_tail()
        else:
            self._put(b'{"passes":[' + b"".join(self._held))
            self._put_tail()
        if self._file is not None:
            self._relink()
        if self._file is not None:
            try:
                self._file.close()
            except OSError as exc:
                self._fail(exc)
            self._file = None

    def _relink(self) -> None:
        """If `path` was removed during the run (its folder deleted), write it again from the
        open file, recreating the folder; else say why not in `failed`."""
        assert self._file is not None
        try:
            if os.stat(self.path).st_ino == self._inode:
                return
        except OSError:
            pass
        if not self._regular:
            return
        try:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            self._file.flush()
            self._file.seek(0)
            with open(self.path, "wb") as copy:
                copy.write(self._file.read())
        except OSError as exc:
            self._fail(
                OSError(exc.errno, f"it was removed during the run and cannot be written again: {exc.strerror or exc}")
            )


class Report:
    """Collects the report of a run from the events of its session and runner (streamed to
    `stream` as passes end, if given)."""

    def __init__(self, stream: JsonStream | None = None) -> None:
        self.stream = stream
        self.script: str | None = None
        self.exit_status: int | None = None
        self.how: str | None = None
        """How the script's process ended when it could not say (a signal, os._exit), else None."""
        self.error: str | None = None
        self.passes: list[dict[str, Any]] = []
        self.breakpoint_hits: list[dict[str, Any]] = []
        self.edits: list[dict[str, Any]] = []
        self._nodes: dict[int, dict[str, Any]] = {}

    def __call__(self, event: ev.Event) -> None:
        """Listener entry point."""
        match event:
            case ev.NodeRan():
                node = self._nodes[event.node]
                node["order"] = event.order
                node["grad_outputs"] = stats_json(event.grad_outputs)
                node["grad_inputs"] = stats_json(event.grad_inputs)
            case ev.PassStarted():
                self._nodes = {i: node_json(i, info) for i, info in event.graph.nodes(data=INFO)}
                self.passes.append(
                    pass_json(
                        index=event.pass_index,
                        call=event.call,
                        call_text=event.call_text,
                        call_site=event.call_site,
                        recorded=event.recorded,
                        losses=event.losses,
                        nodes=list(self._nodes.values()),
                    )
                )
            case ev.PassFinished() if self.passes:
                self.passes[-1]["error"] = event.error
                self.passes[-1]["flow"] = flow_json(event.flow)
                if self.stream is not None:
                    self.stream.add_pass(self.passes.pop(), self._tail())
                    self._nodes = {}
            case ev.NestedPass() if self.passes and self.passes[-1]["index"] == event.pass_index:
                self.passes[-1]["nested"].append(
                    {"call": event.call, "call_site": event.call_site, "nodes": event.nodes, "thread": event.thread}
                )
            case ev.BreakpointHit():
                self.breakpoint_hits.append(
                    {"breakpoint": event.number, "spec": event.spec, "pass": event.pass_index, "node": event.node}
                )
            case ev.GradEdited():
                self.edits.append(
                    {
                        "pass": event.pass_index,
                        "node": event.node,
                        "command": event.command,
                        "before": stats_json(event.before),
                        "after": stats_json(event.after),
                    }
                )
            case ev.ScriptStarted():
                self.script = event.path
            case ev.ScriptFinished():
                self.exit_status = event.exit_status
                self.how = event.how
                self.error = "quit" if event.quit else event.traceback

    def _tail(self) -> dict[str, Any]:
        return {
            "script": self.script,
            "exit_status": self.exit_status,
            "how": self.how,
            "error": self.error,
            "breakpoint_hits": self.breakpoint_hits,
            "edits": self.edits,
        }

    def close(self) -> str | None:
        """Finish the streamed file (if any); returns why writing it failed, or None."""
        if self.stream is None:
            return None
        self.stream.close(self._tail())
        return self.stream.failed

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON-ready dict (without the passes already streamed to a file)."""
        return {
            "script": self.script,
            "exit_status": self.exit_status,
            "how": self.how,
            "error": self.error,
            "passes": self.passes,
            "breakpoint_hits": self.breakpoint_hits,
            "edits": self.edits,
        }

    def write(self, path: str) -> None:
        """Write the report held in memory as compact JSON to `path` (at the end of a run;
        `JsonStream` writes it as passes end)."""
        with open(path, "wb") as handle:
            handle.write(_dumps(self.to_json()))
