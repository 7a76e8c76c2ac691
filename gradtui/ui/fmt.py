"""Small pure text helpers for the widgets: sparklines, stats, source lines, tracebacks."""

from __future__ import annotations

import linecache
import math
import os
import re

from gradtui.protocol.places import library_of
from gradtui.protocol.stats import Stats, format_number

BARS = "▁▂▃▄▅▆▇█"

PREVIEW_LIMIT = 8
"""At most this many values of a gradient are shown."""


def sparkline(counts: tuple[int, ...] | None) -> str:
    """`▁▂▅█▅▂▁`: one bar per bin, an empty bin a space, height relative to the fullest."""
    if not counts:
        return ""
    top = max(counts)
    if top <= 0:
        return " " * len(counts)
    return "".join(" " if c == 0 else BARS[min(len(BARS) - 1, (c * len(BARS) - 1) // top)] for c in counts)


def series_sparkline(values: list[float | None]) -> str:
    """One bar per value, scaled from the smallest to the largest finite value; `·` for a
    missing value (the node got no gradient that pass), `!` for nan or inf."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    low, high = (min(finite), max(finite)) if finite else (0.0, 0.0)
    out = []
    for v in values:
        if v is None:
            out.append("·")
        elif not math.isfinite(v):
            out.append("!")
        elif high == low:
            out.append(BARS[len(BARS) // 2])
        else:
            out.append(BARS[min(len(BARS) - 1, int((v - low) / (high - low) * len(BARS)))])
    return "".join(out)


def shape_text(stats: Stats) -> str:
    """`[64, 16] float32 cpu`."""
    return "[" + ", ".join(str(d) for d in stats.shape) + f"] {stats.dtype} {stats.device}"


def numbers_text(stats: Stats) -> str:
    """`norm 12  min 12  max 12  mean 12`."""
    return "  ".join(
        f"{name} {format_number(value)}"
        for name, value in (("norm", stats.norm), ("min", stats.min), ("max", stats.max), ("mean", stats.mean))
    )


def values_text(stats: Stats) -> str:
    """The first values, `[1, nan, 0.25]` or `[0.1, 0.2, … 1016 more]`; never floods."""
    values = stats.values if stats.values is not None else stats.preview
    shown = [format_number(v) for v in values[:PREVIEW_LIMIT]]
    rest = stats.numel - len(shown)
    if rest > 0:
        shown.append(f"… {rest} more")
    return "[" + ", ".join(shown) + "]"


def one_line(stats: Stats | None) -> str:
    """`[1] float32 cpu  norm 36 …` for lists of gradients."""
    if stats is None:
        return "None"
    extra = f"  non-finite {stats.nonfinite}" if stats.nonfinite else ""
    return f"{shape_text(stats)}  {numbers_text(stats)}{extra}"


def remember_source(path: str, lines: tuple[str, ...]) -> None:
    """Put a file's text the script's process sent (a notebook cell's: `SourceText`) in this
    process's `linecache`, as IPython does (no mtime: `checkcache` keeps it), so every pane that
    reads source here (detail, source view, search) shows its lines."""
    linecache.cache[path] = (sum(map(len, lines)), None, list(lines), path)


def source_lines(path: str | None, line: int | None, context: int = 2) -> list[tuple[int, str, bool]]:
    """(number, text, is_the_line) for a few lines around `path:line`; [] if unreadable."""
    if not path or not line:
        return []
    out = []
    for number in range(max(1, line - context), line + context + 1):
        text = linecache.getline(path, number)
        if not text and number > line:
            break
        out.append((number, text.rstrip("\n").expandtabs(4), number == line))
    return out if any(is_line for _, _, is_line in out) else []


_FRAME = re.compile(r'^  File "([^"]+)", line (\d+), in (.*)$')
_CARETS = re.compile(r"^\s*[\^~]+\s*$")
_GRADTUI_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def library_package(path: str) -> str | None:
    """`torch`, `gradtui` or `python` for a file that is not user code, None for user code."""
    return library_of(path)


def short_path(path: str, home: str | None = None) -> str:
    """A user file's path relative to `home` (the script's folder) if inside it, else its basename."""
    full = os.path.abspath(path)
    if home and full.startswith(os.path.join(os.path.abspath(home), "")):
        return os.path.relpath(full, home)
    return os.path.basename(full)


def user_traceback(text: str, home: str | None = None) -> str:
    """A traceback for people: the user's frames with short paths; runs of frames inside
    torch, gradtui or the standard library folded into one `… 9 frames in torch, gradtui`
    line; no caret lines. Machine-independent (no absolute paths, no library line numbers)."""
    out: list[str] = []
    folded: list[str] = []
    skipping = False

    def fold() -> None:
        if folded:
            names = ", ".join(dict.fromkeys(folded))
            out.append(f"  … {len(folded)} frame{'s' if len(folded) > 1 else ''} in {names}")
            folded.clear()

    for line in text.splitlines():
        frame = _FRAME.match(line)
        if frame:
            package = library_package(frame.group(1))
            skipping = package is not None
            if package is not None:
                folded.append(package)
                continue
            fold()
            out.append(f'  File "{short_path(frame.group(1), home)}", line {frame.group(2)}, in {frame.group(3)}')
            continue
        if line.startswith("    ") and (skipping or _CARETS.match(line)):
            continue
        if not line.startswith("    "):
            fold()
            skipping = False
        out.append(line)
    fold()
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


_SUFFIX = re.compile(r"Backward\d*$")


def short_op(name: str) -> str:
    """`AddmmBackward0` -> `Addmm`; `AccumulateGrad` stays."""
    return _SUFFIX.sub("", name) or name


def list_op(name: str) -> str:
    """The op name a narrow list shows: `Mul` for `MulBackward0`, `AccumGrad` for `AccumulateGrad`."""
    return "AccumGrad" if name == "AccumulateGrad" else short_op(name)


def cut_left(path: str, room: int) -> str:
    """`…layers.3.attn` for a dotted path too long for `room` cells: whole dotted parts
    from the right, never half a word (`…o module)` read as garbage); a single part too long
    is cut at its start."""
    if len(path) <= room:
        return path
    parts = path.split(".")
    kept = ""
    for part in reversed(parts):
        candidate = part if not kept else f"{part}.{kept}"
        if len(candidate) + 1 > room:
            break
        kept = candidate
    if not kept:
        return "…" + path[len(path) - room + 1 :] if room > 1 else "…"
    return "…" + kept


def difference_text(relative: float | None) -> str:
    """A relative difference from the reference in at most 7 cells: `3.1e-02`, `0`, `inf`;
    `-` where it is not known (no match, no value on both sides)."""
    if relative is None:
        return "-"
    if relative == 0:
        return "0"
    if relative != relative or relative == float("inf"):
        return "inf"
    return f"{relative:.1e}"
