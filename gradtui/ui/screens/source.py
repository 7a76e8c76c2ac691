"""The source view (pudb's): the selected node's whole file, scrollable, the node's line
marked `▶`, every line that made nodes of the shown pass marked with their count; enter on
such a line selects one of its nodes (the next one after the node shown, so enter again after
`v` cycles through them), `b` sets `break FILE:LINE` on the line under the cursor.

The file is read here, in the UI's process (`linecache`, which also holds a notebook cell's
text); the nodes come from the pass view, never from a session."""

from __future__ import annotations

import linecache
from dataclasses import dataclass, field

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from gradtui.ui.widgets.source import highlighted

MUTED, WARN, ERROR = "$text-muted", "$text-warning", "$text-error"

NODES_NAMED = 6
"""At most this many of a line's nodes are named in the note above the file."""


@dataclass(frozen=True)
class MadeNode:
    """A node of the shown pass made at a line of the file: its id and its title."""

    node: int
    title: str


@dataclass
class SourceFile:
    """What the source view shows: a file, the node's line, and the nodes each line made."""

    path: str
    name: str
    """The path as shown (relative to the script's folder)."""
    line: int
    node: int
    """The node the view was opened on (enter on its line goes to the next one of that line)."""
    made: dict[int, list[MadeNode]] = field(default_factory=dict)
    """Line number → the nodes of the pass made there, in engine order."""
    breaks: set[int] = field(default_factory=set)
    """Lines of this file with a `FILE:LINE` breakpoint."""

    def lines(self) -> list[str]:
        """The file's lines (tabs expanded), [] if it cannot be read."""
        return [text.rstrip("\n").expandtabs(4) for text in linecache.getlines(self.path)]

    def next_node(self, line: int) -> int | None:
        """The node enter on `line` selects: after the node shown if it is on that line, else the first."""
        nodes = [made.node for made in self.made.get(line, ())]
        if not nodes:
            return None
        at = nodes.index(self.node) if self.node in nodes else -1
        return nodes[(at + 1) % len(nodes)]


class SourceScreen(ModalScreen[int | None]):
    """The whole file of a node (see module doc); dismissed with the node chosen, or None."""

    BINDINGS = [
        Binding("enter", "select_line", "its nodes", priority=True),  # priority: shown, not the list's
        Binding("b", "break_here", "break here"),
        Binding("escape,v", "close", "close"),
    ]

    class BreakRequested(Message):
        """`b` on a line: the app sends `break FILE:LINE`."""

        def __init__(self, path: str, line: int) -> None:
            super().__init__()
            self.path, self.line = path, line

    def __init__(self, source: SourceFile, live: bool = True) -> None:
        """`live`: the script still runs (once it has ended, `b` has nothing to stop)."""
        super().__init__()
        self.source = source
        self.live = live
        self.texts = source.lines()

    def compose(self) -> ComposeResult:
        """A note on the line under the cursor, then the file."""
        with Vertical(id="source-view") as box:
            made = sum(len(nodes) for nodes in self.source.made.values())
            places = len(self.source.made)
            box.border_title = f"{self.source.name} · {made} nodes of this pass on {places} line{'s' * (places != 1)}"
            box.border_subtitle = "enter: its nodes · b: break here · escape"
            yield Static("", id="source-note", markup=False)
            yield OptionList(*self._options(), id="source-lines")
        yield Footer()

    def _options(self) -> list[Option]:
        digits = len(str(len(self.texts)))
        styled = highlighted("\n".join(self.texts)) if self.texts else ()
        return [Option(self._row(number, code, digits), id=str(number)) for number, code in enumerate(styled, start=1)]

    def _row(self, number: int, code: Content, digits: int) -> Content:
        here, count = number == self.source.line, len(self.source.made.get(number, ()))
        gutter = Content.assemble(
            ("▶" if here else " ", WARN),
            ("●" if number in self.source.breaks else " ", ERROR),
            (f"{count}×".rjust(4) if count else "    ", WARN),
            (f" {number:>{digits}} │ ", WARN if here else MUTED),
        )
        return gutter + (code.stylize("bold") if here else code if count else code.stylize("dim"))

    def on_mount(self) -> None:
        """The cursor on the node's line, that line in the middle."""
        lines = self.query_one(OptionList)
        if self.texts:
            lines.highlighted = min(self.source.line, len(self.texts)) - 1
            lines.scroll_to_highlight(top=False)
            self.call_after_refresh(self._centre)
        lines.focus()
        self._note()

    def _centre(self) -> None:
        lines = self.query_one(OptionList)
        if lines.highlighted is not None:
            lines.scroll_to(y=max(0, lines.highlighted - lines.scrollable_content_region.height // 2), animate=False)

    @property
    def cursor_line(self) -> int | None:
        """The line number under the cursor."""
        highlighted_row = self.query_one(OptionList).highlighted
        return None if highlighted_row is None else highlighted_row + 1

    def _note(self) -> None:
        line = self.cursor_line
        made = self.source.made.get(line, []) if line is not None else []
        if not made or line is None:
            text = f"line {line}: no node of this pass" if line is not None else "the file is empty or unreadable"
        else:
            names = " · ".join(m.title for m in made[:NODES_NAMED])  # a title starts with its `#ID`
            more = f" · {len(made) - NODES_NAMED} more" if len(made) > NODES_NAMED else ""
            text = f"line {line} made {len(made)}: {names}{more} · enter: #{self.source.next_node(line)}"
        self.query_one("#source-note", Static).update(text)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        """The cursor moved: say which nodes its line made."""
        event.stop()
        self._note()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """enter (or a click) on a line: select its next node; a line with none says so."""
        event.stop()
        self._select(event.option_index + 1)

    def action_select_line(self) -> None:
        """enter: the next node of the line under the cursor."""
        if self.cursor_line is not None:
            self._select(self.cursor_line)

    def _select(self, line: int) -> None:
        node = self.source.next_node(line)
        if node is None:
            self.query_one("#source-note", Static).update(f"line {line} made no node of this pass: nothing to select")
            return
        self.dismiss(node)

    def action_break_here(self) -> None:
        """`break FILE:LINE` on the line under the cursor (marked `●` here at once)."""
        line = self.cursor_line
        if line is None:
            return
        if not self.live:
            self.query_one("#source-note", Static).update("the script has ended: a breakpoint has nothing to stop")
            return
        if line in self.source.breaks:
            self.query_one("#source-note", Static).update(f"line {line} has a breakpoint already (B lists them)")
            return
        self.source.breaks.add(line)
        lines = self.query_one(OptionList)
        lines.replace_option_prompt_at_index(
            line - 1, self._row(line, highlighted("\n".join(self.texts))[line - 1], len(str(len(self.texts))))
        )
        self.query_one("#source-note", Static).update(f"break {self.source.name}:{line} sent (B lists the breakpoints)")
        self.post_message(self.BreakRequested(self.source.path, line))

    def action_close(self) -> None:
        """Back to the debugger, the selection as it was."""
        self.dismiss(None)
