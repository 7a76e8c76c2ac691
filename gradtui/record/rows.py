"""A recording's rows as plain data, checked: every column has the type the schema gives it.

A damaged file (a flipped byte, a cell overwritten by hand or by another program) can hold a
text where a number belongs, a JSON cell that does not parse, a blob of the wrong length. Each
decoder here raises `BadRow` with a few words naming the column, so the reader can name the
row, skip it and read on (`reader.Recording.damage`), rather than let a `TypeError` surface in
a client long after the read.
"""

from __future__ import annotations

import functools
import json
from array import array
from typing import Any, Literal, overload

from gradtui.protocol.events import GradEdited, ParamFlow
from gradtui.protocol.stats import PREVIEW_LENGTH, Stats, full_stats, unreadable_stats
from gradtui.record import schema


class BadRow(ValueError):
    """A row whose column `what` does not hold what the schema says (the message names it)."""


@functools.lru_cache(maxsize=8192)
def _parsed(text: str) -> Any:
    return json.loads(text)


def json_cell(value: Any, what: str) -> Any:
    """A JSON text cell, parsed (a run repeats the same few texts: they are parsed once)."""
    if type(value) is not str:
        raise BadRow(f"{what} is not JSON text")
    try:
        return _parsed(value)
    except (ValueError, RecursionError):
        raise BadRow(f"{what} is not JSON") from None


def json_list(value: Any, what: str, item=None) -> tuple:
    """A JSON list cell as a tuple; `item(x)` says whether each element is one it may hold."""
    found = json_cell(value, what)
    if type(found) is not list or (item is not None and not all(item(x) for x in found)):
        raise BadRow(f"{what} is not a list of what it should hold")
    return tuple(found)


@overload
def integer(value: Any, what: str, null: Literal[False] = False) -> int: ...
@overload
def integer(value: Any, what: str, null: bool) -> int | None: ...
def integer(value: Any, what: str, null: bool = False) -> int | None:
    """An INTEGER cell (`null`: NULL is allowed)."""
    if value is None and null:
        return None
    if type(value) is not int:
        raise BadRow(f"{what} is not an integer")
    return value


@overload
def real(value: Any, what: str, null: Literal[False]) -> float: ...
@overload
def real(value: Any, what: str, null: bool = True) -> float | None: ...
def real(value: Any, what: str, null: bool = True) -> float | None:
    """A REAL cell back as a float ('nan' was written for NaN, which SQLite would store as NULL)."""
    if value == "nan":
        return float("nan")
    if value is None and null:
        return None
    if type(value) not in (int, float):
        raise BadRow(f"{what} is not a number")
    return float(value)


@overload
def text(value: Any, what: str, null: Literal[False]) -> str: ...
@overload
def text(value: Any, what: str, null: bool = True) -> str | None: ...
def text(value: Any, what: str, null: bool = True) -> str | None:
    """A TEXT cell."""
    if value is None and null:
        return None
    if type(value) is not str:
        raise BadRow(f"{what} is not text")
    return value


def _loss(x: Any) -> bool:
    return x is None or x == "nan" or type(x) in (int, float)


def _node_id(x: Any) -> bool:
    return x is None or type(x) is int


def _is_int(x: Any) -> bool:
    return type(x) is int


def losses(value: Any) -> tuple[float | None, ...]:
    """The `losses` cell: per root its loss, None where it had none."""
    return tuple(real(v, "losses") for v in json_list(value, "losses", _loss))


def shape(value: Any, what: str = "shape") -> tuple[int, ...]:
    """A shape cell: a JSON list of sizes."""
    return json_list(value, what, _is_int)


def labels(value: Any) -> tuple[str, ...]:
    """A node's `labels` cell (NULL: none)."""
    return () if value is None else json_list(value, "labels", lambda x: type(x) is str)


def next_ids(value: Any) -> tuple[int | None, ...]:
    """A node's `next` cell: per input slot the node it sends gradient to, or None."""
    return json_list(value, "next", _node_id)


def nested(value: Any) -> tuple[dict[str, Any], ...]:
    """A pass's `nested` cell (NULL: none)."""
    return () if not value else json_list(value, "nested", lambda x: type(x) is dict)


def stats(row: tuple, slots: int) -> tuple[int, int, int, Stats | None]:
    """A `grads` row (node, dir, slot, then the columns of gradtui.record.schema.GRAD_STATS) as
    (node, direction, slot, its Stats or None for an empty slot). `slots`: how many rows the
    pass has, which no slot number reaches (the writer writes a row for every slot, an empty one
    too): a larger one is damage, and is not let pad the node's slots."""
    node, direction, slot, *cells = row
    integer(node, "node")
    if direction not in (0, 1) or type(direction) is not int:
        raise BadRow("dir is not 0 or 1")
    if type(slot) is not int or not 0 <= slot < slots:
        raise BadRow("slot is not a slot number")
    if cells[0] is None:  # shape NULL: an empty slot
        return node, direction, slot, None
    fields = {column.field: cell(value, column) for column, value in zip(schema.GRAD_STATS, cells, strict=True)}
    values = fields.get("values")
    return node, direction, slot, full_stats(**fields, preview=values[:PREVIEW_LENGTH] if values else ())


def cell(value: Any, column: schema.Column) -> Any:
    """One statistic's `grads` cell, checked and decoded as its column keeps it."""
    null = not column.required
    match column.kept:
        case schema.Kept.SHAPE:
            return shape(value, column.name)
        case schema.Kept.TEXT:
            return text(value, column.name, null)
        case schema.Kept.REAL:
            return real(value, column.name, null)
        case schema.Kept.COUNT:
            return integer(value, column.name, null)
        case schema.Kept.FLOATS:
            if value is None and null:
                return None
            if type(value) is not bytes or len(value) % 8:
                raise BadRow(f"{column.name} is not a list of float64s")
            return tuple(array("d", value))


def flow(row: tuple) -> ParamFlow:
    """A `flow` row (name, node, shape, grad_norm, weight_norm, ratio, nonfinite) as a ParamFlow."""
    name, node, size, g, w, r, bad = row
    return ParamFlow(
        text(name, "name", False),
        integer(node, "node", null=True),
        shape(size),
        real(g, "grad_norm"),
        real(w, "weight_norm", null=False),
        real(r, "ratio"),
        integer(bad, "nonfinite"),
    )


def hit(row: tuple) -> dict[str, Any]:
    """A `hits` row (pass, node, breakpoint, spec): breakpoint number, spec, pass, node."""
    index, node_id, number, spec = row
    return {
        "breakpoint": integer(number, "breakpoint"),
        "spec": text(spec, "spec", False),
        "pass": integer(index, "pass"),
        "node": integer(node_id, "node", null=True),
    }


def edit(row: tuple) -> dict[str, Any]:
    """An `edits` row (pass, node, command, before, after); before and after JSON lists."""
    index, node_id, command, before, after = row
    return {
        "pass": integer(index, "pass"),
        "node": integer(node_id, "node"),
        "command": text(command, "command", False),
        "before": list(json_list(before, "before")),
        "after": list(json_list(after, "after")),
    }


def grad_edited(row: tuple) -> GradEdited:
    """An `edits` row (pass, node, command, before, after) as the event the run sent for it, its
    statistics before and after back as Stats (a replay shows the edit as the live run did)."""
    index, node_id, command, before, after = row
    return GradEdited(
        integer(index, "pass"),
        integer(node_id, "node"),
        text(command, "command", False),
        tuple(_json_stats(s, "before") for s in json_list(before, "before")),
        tuple(_json_stats(s, "after") for s in json_list(after, "after")),
    )


def _json_stats(value: Any, what: str) -> Stats | None:
    """A Stats written as its JSON (`Stats.to_json`: NaN and infinities spelled as strings)."""
    if value is None:
        return None
    if type(value) is not dict:
        raise BadRow(f"{what} is not a list of statistics")
    unreadable = text(value.get("unreadable"), what)
    values = value.get("values")
    if values is not None:
        values = tuple(_json_real(v, what) for v in _list_of(values, what))
        if None in values:
            raise BadRow(f"{what} has a value that is no number")
    norm = _json_real(value.get("norm"), what)
    shape = tuple(integer(n, what) for n in _list_of(value.get("shape"), what))
    dtype, device = text(value.get("dtype"), what, False), text(value.get("device"), what, False)
    if unreadable is not None:
        return unreadable_stats(shape, dtype, device, unreadable)
    return full_stats(
        shape,
        dtype,
        device,
        float("nan") if norm is None else norm,
        _json_real(value.get("min"), what),
        _json_real(value.get("max"), what),
        _json_real(value.get("mean"), what),
        integer(value.get("nonfinite"), what),
        values,
        values[:8] if values else (),
    )


def _list_of(value: Any, what: str) -> list:
    if type(value) is not list:
        raise BadRow(f"{what} is not a list of statistics")
    return value


_SPELLED = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


def _json_real(value: Any, what: str) -> float | None:
    """A number of a JSON Stats: a float, None, or NaN or an infinity spelled as a string."""
    if type(value) is str and value in _SPELLED:
        return _SPELLED[value]
    return real(value, what)


def output(row: tuple) -> tuple[int | None, str, str]:
    """An `output` row (pass, stream, text)."""
    index, stream, line = row
    if stream not in ("stdout", "stderr"):
        raise BadRow("stream is not stdout or stderr")
    return integer(index, "pass", null=True), stream, text(line, "text", False)
