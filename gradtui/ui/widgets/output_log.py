"""The output pane: the script's stdout and stderr, gradtui's answers between them, as a
terminal would show them, and fast whatever the amount.

A Line API widget (ScrollView + `render_line`), like the node list: lines are kept as raw
text (a NamedTuple per line) and turned into styled text only when they are on screen, so
writing 100,000 lines costs a list append each, and a screenful costs what 24 lines cost.
Lines wrap hard at the pane's width (as a terminal wraps), so how many rows a line takes is
its cell length divided by the width: a prefix sum of those maps a scroll offset to a line.

Terminal semantics the script expects: a chunk of output without a final newline leaves its
line open for the next chunk; `\\r` starts the open line over (a tqdm progress bar redraws
one line, it does not add one); ANSI colour codes become styles (`Text.from_ansi`), other
control codes are dropped.
"""

from __future__ import annotations

import bisect
import re
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from itertools import accumulate
from typing import NamedTuple

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

MAX_LINES = 100_000
"""Lines kept; past this the oldest tenth is dropped at once (one rebuild, not one per line)."""

CACHE = 512
"""Rendered lines kept (a few screenfuls), keyed by line and width."""

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")
"""Control codes other than ESC, \\t, \\n and \\r, which would break the layout."""

STREAM_STYLE = {"stdout": "", "stderr": "red"}

ECHO_STYLE, ANSWER_STYLE, ERROR_STYLE, NOTE_STYLE = "bold cyan", "cyan", "red", "dim"
"""How gradtui's own lines stand apart from the script's in the output pane."""


class Line(NamedTuple):
    """One line: its raw text (ANSI codes kept), the style it is drawn in, its cell length,
    and whether it wraps at words (gradtui's own answers) rather than hard (the script's)."""

    text: str
    style: str
    cells: int
    words: bool = False


class Reveal(NamedTuple):
    """A `reveal` asked for: the line to show at the top, and `mark()` when it was asked."""

    line: int
    count: int  # type: ignore[assignment]  # a NamedTuple field named as tuple's method count


_ESCAPE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])")
"""ANSI escape sequences (CSI, OSC, two-character ones): no cells on screen."""


def _cells(text: str) -> int:
    """Cell length of a raw line as drawn (ANSI codes take no cells); a regex, not
    `Text.from_ansi`, which costs 100 µs a line (10 s for 100,000 coloured lines)."""
    if "\x1b" in text:
        text = _ESCAPE.sub("", text)
    return len(text) if text.isascii() else cell_len(text)


class OutputLog(ScrollView, can_focus=True):
    """The script's output and gradtui's answers (see module doc)."""

    DEFAULT_CSS = """
    OutputLog { scrollbar-gutter: stable; overflow-x: hidden; }
    """

    def __init__(self, max_lines: int = MAX_LINES, **kwargs) -> None:
        super().__init__(**kwargs)
        self.max_lines = max_lines
        self._lines: list[Line] = []
        self._open = False
        """The last line has no newline yet: the next chunk goes on it."""
        self._restart = False
        """A `\\r` ended the last chunk: the next text replaces the open line."""
        self._rows: list[int] = []
        """Prefix sums of rows per line at `_rows_width` (rows[i] = rows of lines[:i+1])."""
        self._rows_width = 0
        self._cache: OrderedDict[tuple[int, int], list[Strip]] = OrderedDict()
        self._base = 0
        """How many lines were dropped from the front (cache keys are absolute line numbers)."""
        self._following = False
        """A scroll to the end is scheduled (after the next refresh)."""
        self.follow = True
        """Keep the newest line in sight: true until the user scrolls up, again once they
        scroll back to the end. Only the user's scrolling changes it: a resize (the pane
        zoomed, then back) or the pane's own scrolling keeps it as it was."""
        self._scrolling = False
        """The pane scrolls itself (follow, reveal): not the user's doing."""
        self._reveal: Reveal | None = None
        """A line to show at the top once laid out (see `reveal`)."""
        self.renders = 0
        """How many lines were turned into styled text (the cost a flood must not grow)."""

    # ---- what the pane holds -------------------------------------------------------------

    @property
    def line_count(self) -> int:
        """How many lines are kept."""
        return len(self._lines)

    def plain_lines(self) -> list[str]:
        """Every kept line as plain text (ANSI codes removed): what a reader sees, unwrapped."""
        return [_ESCAPE.sub("", line.text) if "\x1b" in line.text else line.text for line in self._lines]

    def styled_line(self, index: int) -> Text:
        """Line `index` as styled text."""
        line = self._lines[index]
        return Text.from_ansi(line.text, style=line.style)

    # ---- writing -------------------------------------------------------------------------

    def write_stream(self, text: str, style: str = "") -> None:
        """Add a chunk of the script's output with terminal semantics (see module doc)."""
        self.write_streams([(text, style)])

    def write_streams(self, chunks: Iterable[tuple[str, str]]) -> None:
        """Add chunks of output, (text, style) each (stdout and stderr in turn), drawn once."""
        for text, style in chunks:
            self._write(text, style)
        self._changed()

    def _write(self, text: str, style: str) -> None:
        text = _CONTROL.sub("", text.replace("\r\n", "\n").expandtabs(8))
        for i, piece in enumerate(text.split("\n")):
            if i > 0:  # a newline ended the previous piece
                if not self._open:
                    self._append("", style)  # a bare newline: an empty line
                self._open = self._restart = False
            for j, part in enumerate(piece.split("\r")):
                if j > 0:
                    self._restart = True
                if part:
                    self._put(part, style)

    def _put(self, part: str, style: str) -> None:
        if self._open and not self._restart:
            last = self._lines[-1]
            self._replace(last.text + part, last.style)
        elif self._open:
            self._replace(part, style)
        else:
            self._append(part, style)
        self._open, self._restart = True, False

    def write_lines(self, text: str, style: str = "") -> None:
        """Add whole lines of gradtui's own (an answer, a notice): never joined to the script's
        open line, and the script's next output starts on a line of its own."""
        self._open = False
        self._restart = False
        for piece in _CONTROL.sub("", text.replace("\r", "")).rstrip("\n").split("\n"):
            self._append(piece, style, words=True)
        self._changed()

    def clear(self) -> None:
        """Forget every line."""
        self._base += len(self._lines)
        self._lines.clear()
        self._rows.clear()
        self._cache.clear()
        self._open = self._restart = False
        self._changed()

    def _append(self, text: str, style: str, words: bool = False) -> None:
        self._lines.append(Line(text, style, _cells(text), words))
        if self._rows_width:
            index = len(self._lines) - 1
            self._rows.append((self._rows[-1] if self._rows else 0) + self._row_count(index, self._lines[-1]))

    def _replace(self, text: str, style: str) -> None:
        index = len(self._lines) - 1
        old = self._lines[index]
        new = self._lines[index] = Line(text, style, _cells(text))
        self._cache.pop((self._base + index, self._rows_width), None)
        if self._rows_width and self._rows:
            self._rows[-1] += self._row_count(index, new) - max(1, -(-old.cells // self._rows_width))

    def _changed(self) -> None:
        if len(self._lines) > self.max_lines:
            drop = len(self._lines) - self.max_lines + self.max_lines // 10
            del self._lines[:drop]
            self._base += drop
            self._cache.clear()
            self._rows_width = 0  # rebuilt on next use
        self._resize()
        if self.follow:
            self._schedule_follow()
        self.refresh()

    def _schedule_follow(self) -> None:
        if not self._following:
            # after the refresh: the new virtual size is not laid out yet
            self._following = True
            self.call_after_refresh(self._follow)

    def _follow(self) -> None:
        self._following = False
        if not self.follow:
            return
        reveal, self._reveal = self._reveal, None
        top = self.max_scroll_y
        # a long answer: its first line at the top, not its tail; unless more was written after
        # it (or it was dropped): the newest line is then the one to see
        if reveal is not None and reveal.count == self.mark() and reveal.line >= self._base:
            self._ensure_rows()
            index = reveal.line - self._base
            top = min(top, self._rows[index - 1] if 0 < index <= len(self._rows) else 0)
        self._scroll_self(top)

    def _scroll_self(self, y: float) -> None:
        # NOTE: `force`: Textual scrolls a widget only while it shows its scroll bar, and the
        # bar is shown by the layout pass, which may not have run since the lines that made
        # the pane taller than its height arrived (on a loaded machine the follow then did
        # nothing and the pane stayed at its top with the newest lines out of sight).
        self._scrolling = True
        try:
            self.scroll_to(y=y, animate=False, immediate=True, force=True)
        finally:
            self._scrolling = False

    def mark(self) -> int:
        """The number of the next line written (for `reveal`)."""
        return self._base + len(self._lines)

    def reveal(self, line: int) -> None:
        """Once laid out, show line `line` (a `mark`) at the top if what follows it is taller
        than the pane, else the end: a long answer is read from its first line. Only while
        the pane follows (a user who scrolled up keeps their place), and only if nothing was
        written after it by then (the newest line is then the one to see)."""
        if self.follow:
            self._reveal = Reveal(line, self.mark())
            self._schedule_follow()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        """The user scrolled: follow the output again only if they are at the end."""
        super().watch_scroll_y(old_value, new_value)
        if not self._scrolling and round(old_value) != round(new_value):
            self.follow = new_value >= self.max_scroll_y - 1

    # ---- geometry ------------------------------------------------------------------------

    def _width(self) -> int:
        return max(1, self.scrollable_content_region.width)

    def _row_count(self, index: int, line: Line) -> int:
        """Rows line `index` takes at the current width: cells / width when it wraps hard; its
        word-wrapped rows otherwise (gradtui's lines are few, so wrapping them to count is cheap)."""
        if line.words and line.cells > self._rows_width:
            return len(self._strips(index, self._rows_width))
        return max(1, -(-line.cells // self._rows_width))

    def _ensure_rows(self) -> None:
        width = self._width()
        if width != self._rows_width or len(self._rows) != len(self._lines):
            self._rows_width = width
            self._rows = list(accumulate(self._row_count(i, line) for i, line in enumerate(self._lines)))

    def _resize(self) -> None:
        self._ensure_rows()
        self.virtual_size = Size(self._rows_width, self._rows[-1] if self._rows else 0)

    def on_resize(self) -> None:
        """Rewrap: the rows each line takes depend on the width; keep the end in sight if
        following (a zoomed pane made small again would otherwise stop at its old top)."""
        self._resize()
        if self.follow:
            self._schedule_follow()
        self.refresh()

    # ---- drawing -------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        """Row `scroll_y + y`: a part of one wrapped line."""
        self._ensure_rows()
        row = round(self.scroll_offset.y) + y
        width = self._rows_width
        base = self.rich_style
        if row < 0 or not self._rows or row >= self._rows[-1]:
            return Strip.blank(self.size.width, base)
        index = bisect.bisect_right(self._rows, row)
        first = self._rows[index - 1] if index else 0
        strips = self._strips(index, width)
        part = row - first
        strip = strips[part] if part < len(strips) else Strip.blank(width)
        return strip.apply_style(base).crop_extend(0, self.size.width, base)

    def _strips(self, index: int, width: int) -> list[Strip]:
        key = (self._base + index, width)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        self.renders += 1
        line = self._lines[index]
        text = Text.from_ansi(line.text, style=line.style) if "\x1b" in line.text else Text(line.text, line.style)
        console = self.app.console
        strips: Sequence[Strip]
        if line.words and text.cell_len > width:
            strips = [
                Strip(list(part.render(console)), part.cell_len) for part in text.wrap(console, width, overflow="fold")
            ]
        else:
            whole = Strip(list(text.render(console)), text.cell_len)
            total = whole.cell_length
            strips = whole.divide([*range(width, total, width), total]) if total > width else [whole]
        strips = [s.crop_extend(0, width, Style()) for s in strips] or [Strip.blank(width)]
        self._cache[key] = strips
        if len(self._cache) > CACHE:
            self._cache.popitem(last=False)
        return strips
