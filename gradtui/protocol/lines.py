"""Text written to a stream, split into the Output events of its complete lines: the one
splitter behind every capture of a script's output (the in-process runner's streams,
gradtui.engine.process.runner; a recording's tee, gradtui.record.tee; the agent's fd tee,
gradtui.agent.output; a child agent's pipes, gradtui.wire.child)."""

from __future__ import annotations

from typing import cast

from gradtui.protocol.events import Output, Stream

STREAMS = ("stdout", "stderr")


class LineSplitter:
    """Holds what `feed` was given until a line ends; one Output per call that completes any
    (all the lines it completed, together: a burst of lines is one event, not one each).
    Not thread-safe: its caller holds its own lock, where it needs one."""

    def __init__(self, stream: str) -> None:
        if stream not in STREAMS:
            raise ValueError(f"not an output stream: {stream!r}")
        self.stream = cast(Stream, stream)
        self._pending = ""

    def feed(self, text: str) -> Output | None:
        """`text` written; the Output of the lines it completed, or None."""
        self._pending += text
        if "\n" not in self._pending:
            return None
        complete, _, self._pending = self._pending.rpartition("\n")
        return Output(self.stream, complete + "\n")

    def end(self, text: str = "") -> Output | None:
        """The stream ended (or is flushed for good): the last partial line with `text` (a
        decoder's tail) after it, if any, as one Output."""
        rest, self._pending = self._pending + text, ""
        return Output(self.stream, rest) if rest else None
