"""Headless mode: run the given commands at the pauses, print everything as readable lines.

The driver is a listener of events: in-process (`gradtui --headless`) it is a session
listener on the script's thread; for `gradtui attach --headless` it is fed the events that
arrive over the wire. Either way a `CommandFeeder` says when the next command is due, and
the driver submits it, parsed, to its target (anything with `submit(command)` and `detach()`). When the
commands run out the target is detached: the script runs to its end without pausing (a
remote agent keeps its breakpoints armed for the next client). The script's stderr goes to
`err`, its stdout and everything of gradtui's to `out`.
"""

from __future__ import annotations

import linecache
from typing import Any, TextIO

from gradtui.clients.feeder import CommandFeeder
from gradtui.protocol import events as ev
from gradtui.protocol.commands import Continue, asks_flow
from gradtui.protocol.nodes import node_info, node_title
from gradtui.protocol.stats import format_grads


class HeadlessDriver:
    """Feeds `commands` to `target` one at a time and prints the events to `out` (see module doc)."""

    def __init__(
        self, target: Any, commands: list[str], out: TextIO, err: TextIO | None = None, *, sole: bool = False
    ) -> None:
        """Each line is parsed once, by the feeder, before it is sent (one that does not parse is
        said and skipped): the target gets the command.
        `sole`: this driver is the only source of commands and `target` the in-process Session
        (`gradtui --headless`): once its last command is a `continue` with no breakpoint armed,
        nothing can stop the script again, and the session is detached at once (it then stops
        recording the forward's provenance)."""
        self.target = target
        self._sole = sole
        self.feeder = CommandFeeder(commands)
        self.out = out
        self.err = err if err is not None else out
        self._graph = None
        self._line_open = False
        """The script's output so far ends without a newline: our next line must start one."""
        self._unhooked: tuple[int, int] | None = None
        """The first and last index of the passes that ran unhooked since the last line about
        passes (two numbers, not a list of every index: a run of a million unhooked passes
        would otherwise hold a million integers until its end)."""
        self._asked: str | None = None
        """The command this driver sent that is not answered yet: its own edit's answer says what it did."""
        self.reads_flow = asks_flow(commands)
        """Is one of the commands a `flow`? Else the driver reads no pass's gradient flow (it prints
        neither the flow nor the leaves' gradients), and a hooked pass need not compute them for it."""

    def _write(self, text: str, stream: str = "stdout") -> None:
        """Write the script's own text (output, traceback) as it is, to its own stream."""
        if not text:
            return
        if stream == "stderr" and self.err is not self.out:
            self.err.write(text)
            self.err.flush()
            return
        self.out.write(text)
        self.out.flush()
        self._line_open = not text.endswith("\n")

    def _end_line(self) -> None:
        """Finish a line the script left open, so what follows starts a line of its own."""
        if self._line_open:
            self.out.write("\n")
            self._line_open = False

    def _print(self, text: str) -> None:
        """Write one line of ours, on a line of its own."""
        self._end_line()
        self.out.write(text if text.endswith("\n") else text + "\n")
        self.out.flush()

    def _feed(self) -> None:
        """Submit the next valid command, or detach when there are none left."""
        while (typed := self.feeder.pop()) is not None:
            self._print(f"(gradtui) {typed.text}")
            command = typed.command
            if command is None:
                self._print(f"error: {typed.error}")
                self.feeder.skipped()
                continue
            self._asked = command.text
            self.feeder.sent(self.target.submit(command))
            if (
                self._sole
                and not self.feeder.commands
                and not len(self.target.breakpoints)
                and isinstance(command, Continue)
            ):
                self.target.detach()  # silently: nothing would pause to say "no more commands"
            return
        self._print("(gradtui) -- no more commands: running to the end")
        self.target.detach()

    def _flush_unhooked(self) -> None:
        """One line for the passes that ran unhooked since the last line about passes."""
        if self._unhooked is None:
            return
        first, last = self._unhooked
        which = f"pass {first}" if first == last else f"passes {first}-{last}"
        self._print(f"{which} ran unhooked at plain speed: nothing could stop in {'it' if first == last else 'them'}")
        self._unhooked = None

    def __call__(self, event: ev.Event) -> None:
        """Listener entry point."""
        due = self.feeder.due(event)
        self._show(event)
        if due:
            self._feed()

    def _show(self, event: ev.Event) -> None:
        """Print one event."""
        match event:
            case ev.Output():
                self._flush_unhooked()  # keep our lines and the script's output in the order they happened
                self._write(event.text, event.stream)
            case ev.PassStarted():
                self._pass_started(event)
            case ev.NestedPass():
                self._print(
                    f"  nested {event.call}() at {event.call_site} in {event.thread} · {event.nodes} nodes"
                    f" · ran unhooked inside pass {event.pass_index}"
                )
            case ev.Paused():
                self._paused(event)
            case ev.GradEdited():
                self._edited(event)
            case ev.Notice():
                self._flush_unhooked()
                self._print(f"note: {event.text}")
            case ev.CommandResult():
                self._asked = None
                prefix = "" if event.ok else "error: "
                for line in event.text.splitlines() or [""]:
                    self._print(f"  {prefix}{line}")
            case ev.PassFinished():
                self._pass_finished(event)
            case ev.ScriptFinished():
                self._script_finished(event)

    def _pass_started(self, event: ev.PassStarted) -> None:
        if not event.recorded:
            first = event.pass_index if self._unhooked is None else self._unhooked[0]
            self._unhooked = (first, event.pass_index)
            return
        self._flush_unhooked()
        self._graph = event.graph
        loss = ", ".join(f"{v:.6g}" for v in event.losses if v is not None)
        self._print(
            f"pass {event.pass_index} · {event.call_text or event.call} at {event.call_site}"
            f"{f' · loss {loss}' if loss else ''} · {event.nodes or event.graph.number_of_nodes()} nodes"
        )

    def _paused(self, event: ev.Paused) -> None:
        where = "before" if event.phase == "before" else "after"
        title = node_title(self._graph, event.node) if self._graph is not None else f"#{event.node}"
        self._print(
            f"paused {where} {title} · pass {event.pass_index} · {event.done}/{event.total} done · {event.reason}"
        )
        data = node_info(self._graph, event.node) if self._graph is not None else None
        if data is not None and data.source:
            module = f" in {data.module}" if data.module else ""
            text = linecache.getline(data.path, data.line).strip()
            self._print(f"  at {data.source}{module}" + (f": {text}" if text else ""))
        for line in format_grads(event.grads, event.phase):
            self._print(f"  {line}")

    def _edited(self, event: ev.GradEdited) -> None:
        """An edit this driver did not ask for (a replay tells the run's): what it did, and the
        gradient before and after it."""
        if event.command == self._asked:
            return  # its answer ("gradient now ...") says it
        title = node_title(self._graph, event.node) if self._graph is not None else f"#{event.node}"
        self._print(f"the run edited the gradient arriving at {title} in pass {event.pass_index}: {event.command}")
        for line in format_grads(event.before, "before"):
            self._print(f"    before the edit: {line}")
        for line in format_grads(event.after, "before"):
            self._print(f"    after the edit:  {line}")

    def _pass_finished(self, event: ev.PassFinished) -> None:
        if self._unhooked is not None and self._unhooked[1] == event.pass_index:
            if event.error is not None:
                self._flush_unhooked()
                self._print(f"pass {event.pass_index} failed: {event.error}")
            return
        status = "done" if event.error is None else f"failed: {event.error}"
        where = f" at #{event.node}" if event.node is not None else ""
        self._print(f"pass {event.pass_index} {status}{where} · {event.done}/{event.total} nodes ran")

    def _script_finished(self, event: ev.ScriptFinished) -> None:
        self._flush_unhooked()
        if event.traceback:
            self._end_line()
            self._write(event.traceback, "stderr")
        if event.quit:
            self._print("quit: the script was stopped")
        if event.how:
            self._print(f"the script's process {event.how}")
        if event.passes == 0:
            self._print("note: the script never called backward() or torch.autograd.grad()")
        if event.exit_status is None:  # a recording that does not say how its run ended
            self._print("script exit status unknown")
        else:
            self._print(f"script exited with status {event.exit_status}")
        self.say_not_run()

    def say_not_run(self) -> None:
        """Name the commands the run ended before (one line; none: nothing), so none is dropped
        unsaid; each is said once."""
        left = self.feeder.take_left()
        if left:
            self._print(f"(gradtui) -- the run has ended: not run: {'; '.join(left)}")
