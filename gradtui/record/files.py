"""Which source file and line of one run is which of another's (`gradtui diff`).

A node's place is recorded as `file.py:LINE` (the file's base name). Two runs of the same program
may not name it the same: the script copied to `train_changed.py`, a line inserted above the
changed op. Node matching (gradtui.record.compare.match) then sees nothing in common and calls
every node a graph change. So before nodes are matched, B's places are put in A's terms:

- files: the script to the script (each run's `run.script`), then a file to the file of the same
  name, then to a file of the same content (read from beside each run's script, where it still
  is); a file left over has no counterpart and its nodes match nothing;
- lines: where both texts are found, by a line diff (difflib): a line B kept maps to where it is
  in A, a line changed in place (a block of as many lines replaced) to the line it replaced, an
  inserted line to none. Where a text is not found the line numbers are taken as they are.

What moved (a file under another name, lines shifted) is reported: a verdict says what it
matched. Torch-free and read-only: it reads source files, never writes.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class FilePair:
    """A file of A and its counterpart in B, and how they were matched."""

    a: str
    b: str
    how: str
    """`the scripts`, `same name`, `same content`."""
    lines: dict[int, int | None] | None = None
    """B's line -> A's line (None: a line of B's only); None: the lines are taken as they are."""
    shifted: int = 0
    """How many of B's lines that ran map to another line number in A."""

    def line_of(self, line: int) -> int | None:
        """A's line for B's `line` (None: it has none)."""
        return line if self.lines is None else self.lines.get(line)


def _split(source: str | None) -> tuple[str, int] | None:
    if not source or ":" not in source:
        return None
    name, _, line = source.rpartition(":")
    return (name, int(line)) if line.isdigit() else None


def _text(folder: str | None, name: str) -> list[str] | None:
    if folder is None:
        return None
    try:
        with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return None


def _line_map(a: list[str], b: list[str]) -> dict[int, int | None]:
    """B's line number -> A's (1-based) from a line diff (see the module doc)."""
    out: dict[int, int | None] = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        for k, j in enumerate(range(j1, j2)):
            match tag:
                case "equal":
                    out[j + 1] = i1 + k + 1
                case "replace" if i2 - i1 == j2 - j1:
                    out[j + 1] = i1 + k + 1
                case _:
                    out[j + 1] = None
    return out


@dataclass
class FileMap:
    """B's places in A's terms (see the module doc); built by `match_files`."""

    pairs: dict[str, FilePair] = field(default_factory=dict)
    """B's file name -> its pair."""
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)

    def place(self, source: str | None) -> str | tuple[str, str] | None:
        """B's `file:LINE` as A would name it; a place with no counterpart in A becomes a value no
        source of A's equals (so its node matches nothing); a file not seen by `match_files` is
        taken by its name."""
        split = _split(source)
        if split is None:
            return source
        pair = self.pairs.get(split[0])
        if pair is None:  # a file of B's without a counterpart, or one not seen when matching
            return ("only in B", source or "") if split[0] in self.only_b else source
        line = pair.line_of(split[1])
        return ("only in B", source or "") if line is None else f"{pair.a}:{line}"

    def moved(self) -> list[FilePair]:
        """The pairs under different names or with lines that moved (what a report names)."""
        return [p for p in self.pairs.values() if p.a != p.b or p.shifted]


def match_files(
    script_a: str | None, script_b: str | None, sources_a: set[str | None], sources_b: set[str | None]
) -> FileMap:
    """Match the files of A's `sources_a` with B's `sources_b` (`file:LINE` each), their texts
    read from beside each run's script (see the module doc)."""
    folder_a = os.path.dirname(script_a) if script_a else None
    folder_b = os.path.dirname(script_b) if script_b else None
    names_a = sorted({s[0] for s in map(_split, sources_a) if s})
    names_b = sorted({s[0] for s in map(_split, sources_b) if s})
    lines_b: dict[str, set[int]] = {}
    for s in map(_split, sources_b):
        if s:
            lines_b.setdefault(s[0], set()).add(s[1])
    found: list[tuple[str, str, str]] = []
    left_a, left_b = list(names_a), list(names_b)
    base_a = os.path.basename(script_a) if script_a else None
    base_b = os.path.basename(script_b) if script_b else None
    if base_a in left_a and base_b in left_b:
        found.append((base_a, base_b, "the scripts"))
        left_a.remove(base_a)
        left_b.remove(base_b)
    for name in list(left_a):
        if name in left_b:
            found.append((name, name, "same name"))
            left_a.remove(name)
            left_b.remove(name)
    texts_b = {name: _text(folder_b, name) for name in left_b}
    for name in list(left_a):
        text = _text(folder_a, name)
        same = next((n for n in left_b if text is not None and texts_b[n] == text), None)
        if same is not None:
            found.append((name, same, "same content"))
            left_a.remove(name)
            left_b.remove(same)
    out = FileMap(only_a=left_a, only_b=left_b)
    for a, b, how in found:
        text_a, text_b = _text(folder_a, a), _text(folder_b, b)
        lines = _line_map(text_a, text_b) if text_a is not None and text_b is not None and text_a != text_b else None
        ran = lines_b.get(b, set())
        shifted = sum(1 for line in ran if lines is not None and lines.get(line, line) != line)
        out.pairs[b] = FilePair(a, b, how, lines, shifted)
    return out
