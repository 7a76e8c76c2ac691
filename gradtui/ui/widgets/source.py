"""The node's source in the detail pane: its line, with a few lines around or alone on a row,
highlighted by pygments once per text.

A step shows the same few lines again and again, and pygments takes milliseconds a call (its
Python lexer 0.25 s on first use, which `warm_highlighter` spends while the script starts), so
the highlighted lines are cached by the text itself: a file edited since shows as it is now.
"""

from __future__ import annotations

import functools

from textual.content import Content
from textual.highlight import highlight

from gradtui.protocol.nodes import NodeInfo
from gradtui.ui import fmt

SOURCE_CONTEXT = 2
"""Lines of source shown above and below the node's line."""

MUTED, WARN = "$text-muted", "$text-warning"


@functools.lru_cache(maxsize=256)
def highlighted(code: str) -> tuple[Content, ...]:
    """Python source, highlighted, one Content per line (cached: see module doc)."""
    return tuple(highlight(code, language="python").split("\n"))


def warm_highlighter() -> None:
    """Build pygments' Python lexer before the first pass needs it (run in a thread)."""
    highlight("pass", language="python")


def _cut(code: Content, length: int, room: int) -> Content:
    """Source lines never wrap: cut to `room` cells with an ellipsis."""
    return code[: room - 1] + Content("…") if length > room else code


def source_row(data: NodeInfo, width: int) -> list[Content]:
    """`at demo.py:24 │ loss = ((prediction - target) ** 2).mean()`: the line on one row (the
    80x24 layout); `at demo.py:24` alone if the file cannot be read."""
    lines = [entry for entry in fmt.source_lines(data.path, data.line, context=0) if entry[2]]
    if not lines:
        return [Content.assemble(("at ", MUTED), (data.source, WARN))] if data.source else []
    text = lines[0][1].strip()
    # 3 for "at ", 3 for " │ ", 2 in case a scrollbar appears once the text is in
    room = max(8, width - len(data.source or "") - 8)
    code = _cut(highlighted(text)[0], len(text), room)
    return [Content.assemble(("at ", MUTED), (data.source or "", WARN), (" │ ", MUTED), code.stylize("bold"))]


def source_block(data: NodeInfo, width: int) -> list[Content]:
    """The node's line with SOURCE_CONTEXT lines around, numbered, the line marked and bold,
    the others dim; [] if the file cannot be read."""
    lines = fmt.source_lines(data.path, data.line, context=SOURCE_CONTEXT)
    if not lines:
        return []
    digits = len(str(lines[-1][0]))
    room = max(8, width - digits - 5)
    out = []
    for (number, text, here), styled in zip(lines, highlighted("\n".join(text for _, text, _ in lines))):
        styled = _cut(styled, len(text), room)
        out.append(
            Content.assemble(
                ("▶ " if here else "  ", WARN),
                (f"{number:>{digits}} │ ", WARN if here else MUTED),
                styled.stylize("bold") if here else styled.stylize("dim"),
            )
        )
    return out
