"""The -c / -x commands of a run, fed one at a time: the one feeder every client uses.

pdb's `-c` semantics: at each pause the next command is sent; when its answer arrives and the
engine is still paused, the one after. A command that resumes the engine (`step`,
`continue`...) gets no answer: the next command waits for the next pause, unless it is a
`pause` (a break-in), which is sent while the engine runs: `-c continue -c pause` breaks in
again at once, and a client that attaches to a running script with `-c pause` first breaks in. Headless mode, the
UI and `attach --headless` all feed their commands through this.

The lines of `-c` / `-x` enter here: each is parsed once, when it is next (`Typed`: its command
or the parser's refusal), and handed out parsed; a 200,000-line file is not parsed ahead.
"""

from __future__ import annotations

from collections import deque

from gradtui.protocol import events as ev
from gradtui.protocol.commands import BreakIn, Typed


class CommandFeeder:
    """Decides when the next of `commands` is due, from the events a client sees."""

    def __init__(self, commands: list[str] | tuple[str, ...]) -> None:
        self.commands = deque(commands)
        """The commands not handed out yet (a deque: taking the first is O(1); a list's pop(0)
        shifted every later one, quadratic in a 200,000-line -x file)."""
        self.paused = False
        """Is the engine paused now (as far as the events said)?"""
        self._awaiting: int | None = None
        self._sent = False
        self._head: Typed | None = None
        """The first of `commands`, parsed (once: `pop` hands this out)."""
        self.started = False
        """Has any command been handed out yet?"""

    def due(self, event: ev.Event) -> bool:
        """Update the pause state from `event`; True when the next command should be sent now."""
        match event:
            case ev.Paused():
                self.paused = True
                if self._sent and self._awaiting is not None:
                    return False  # the same stop shown again (a job's `rank N`): its answer is due first
                self._awaiting = None
                self._sent = False
                return True
            case ev.Resumed():
                self.paused = False
                self._awaiting = None
                self._sent = False  # a resuming command gets no answer: it is done
            case ev.PassFinished() | ev.ScriptFinished():
                self.paused = False
                self._awaiting = None
            case ev.CommandResult(request=request):
                mine = self._sent and (request is None or self._awaiting is None or request == self._awaiting)
                if self.paused and mine:
                    self._sent = False
                    return True
        return not self.paused and not self._sent and self._breaks_in_next()

    def _next(self) -> Typed | None:
        """The next command, parsed once (None when they have run out)."""
        if not self.commands:
            return None
        if self._head is None:
            self._head = Typed.of(self.commands[0])
        return self._head

    def _breaks_in_next(self) -> bool:
        """Is the next command a `pause`, due while the engine runs?"""
        head = self._next()
        return head is not None and isinstance(head.command, BreakIn)

    def pop(self) -> Typed | None:
        """The next command, parsed (or the parser's refusal), or None when they have run out."""
        head = self._next()
        if head is None:
            return None
        self.commands.popleft()
        self._head = None
        self._sent = True
        self.started = True
        return head

    def take_left(self) -> list[str]:
        """The commands not handed out, taken away: the run ended before them."""
        left = list(self.commands)
        self.commands.clear()
        self._head = None
        return left

    def sent(self, request: int | None) -> None:
        """The command just popped was submitted with this request id (answers carry it)."""
        self._awaiting = request

    def skipped(self) -> None:
        """The command just popped was not sent (it did not parse): the next one is due now."""
        self._sent = False
