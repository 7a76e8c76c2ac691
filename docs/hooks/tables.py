"""MkDocs hook: the manual's command table and breakpoint-spec table are made from gradtui's own
tables (the command classes of gradtui.protocol.commands, the breakpoint kinds of
gradtui.protocol.breakpoints), so the docs list exactly what the parser accepts. A page asks for
them with the markers `<!-- commands -->` and `<!-- break-specs -->`."""

from __future__ import annotations

from typing import Any


def _code(usage: str) -> str:
    """`break SPEC` (`b`): the usage in code, its aliases too."""
    words, _, aliases = usage.partition(" (")
    if not aliases:
        return f"`{words}`"
    return f"`{words}` (" + ", ".join(f"`{a.strip()}`" for a in aliases.rstrip(")").split(",")) + ")"


def commands_table() -> str:
    """The command table as markdown."""
    from gradtui.protocol.commands import manual_rows

    rows = [f"| {_code(usage)} | {meaning} |" for usage, meaning in manual_rows()]
    return "\n".join(["| command | meaning |", "| --- | --- |", *rows])


def specs_table() -> str:
    """The breakpoint specs as markdown, one row per kind."""
    from gradtui.protocol.breakpoints import KINDS

    rows = []
    for kind in KINDS:
        example = f", `{kind.example}`" if kind.example and "," not in kind.example else ""
        rows.append(f"| `{kind.form}`{example} | {kind.stops} |")
    return "\n".join(["| spec | stops |", "| --- | --- |", *rows])


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Put the generated tables where a page asks for them."""
    return markdown.replace("<!-- commands -->", commands_table()).replace("<!-- break-specs -->", specs_table())
