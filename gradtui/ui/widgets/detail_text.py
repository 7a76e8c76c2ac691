"""The detail pane's words: its colours, a line of styled parts, the heading of a section, non-finite
numbers marked, and which saved values are worth a line. Shared by the pane's renderers.
"""

from __future__ import annotations

from textual.content import Content

MUTED, KEY, ERROR, WARN, OK, ACCENT = (
    "$text-muted",
    "bold",
    "$text-error",
    "$text-warning",
    "$text-success",
    "$text-accent",
)


def line(*parts: str | Content | tuple[str, str]) -> Content:
    """One line of text and (text, style) parts."""
    return Content.assemble(*parts)


def bad(text: Content) -> Content:
    """Non-finite numbers (`nan`, `inf`, `-inf`) in the error colour."""
    return text.highlight_regex(r"-?\b(nan|inf)\b", style=f"bold {ERROR}")


def heading(text: str, note: str = "", note_style: str = MUTED) -> Content:
    """A section's heading, with a note after it."""
    return line((text, "bold $text-primary"), ("  " + note if note else "", note_style))


def saved_text(saved: tuple[str, ...]) -> str:
    """The saved values worth reading: tensors first, then scalars; no `*_sym_*` metadata, no None."""
    useful = [item for item in saved if "_sym_" not in item.split(" ", 1)[0] and not item.endswith(("= None", "= ()"))]
    tensors = [item for item in useful if " [" in item]
    return "  ".join(tensors + [item for item in useful if item not in tensors])
