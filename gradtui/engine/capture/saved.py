"""What a node saved for its backward, described without keeping it: shapes, dtypes, scalars.

A captured node's `saved` field (gradtui.protocol.nodes.NodeInfo) is a few words per `_saved_*`
attribute; a pass repeats the same shapes and scalars thousands of times, so descriptions of
plain values are remembered (never of a tensor itself). A value packed by a saved-tensors hook
is named, not read: reading it would run the unpack hook.
"""

from __future__ import annotations

from typing import Any

import torch

from gradtui.engine.compat import saved_argument

Node = torch.autograd.graph.Node

_saved_attrs: dict[type, tuple[tuple[str, str, str | None], ...]] = {}
"""Per node type: (label, `_saved_*` attribute, its `_raw_saved_*` attribute if the type has one)."""

_described: dict[Any, str] = {}
"""Descriptions of saved values by (type, value) or (shape, dtype): a pass repeats the same few
shapes, sizes and scalars thousands of times."""
_DESCRIBED_LIMIT = 50_000

_summaries: dict[tuple[str, ...], tuple[str, ...]] = {}
"""Each distinct summary once: a pass's nodes keep the same one (a 500,000-node chain of
multiplications by one scalar: one tuple, not 500,000 equal ones at ~180 bytes each)."""


def _saved_fields(node: Node) -> tuple[tuple[str, str, str | None], ...]:
    cls = type(node)
    fields = _saved_attrs.get(cls)
    if fields is None:
        fields = tuple(
            (a.removeprefix("_saved_"), a, "_raw" + a if hasattr(cls, "_raw" + a) else None)
            for a in dir(node)
            if a.startswith("_saved_")
        )
        _saved_attrs[cls] = fields
    return fields


def saved_summary(node: Node) -> tuple[str, ...]:
    """Describe a node's `_saved_*` values without keeping them: shapes, or scalar values."""
    out = []
    for label, attr, raw in _saved_fields(node):
        if raw is not None and _packed(getattr(node, raw, None)):
            out.append(f"{label} (packed by a saved-tensors hook)")
            continue
        try:
            value = getattr(node, attr)
        except RuntimeError:
            out.append(f"{label} (freed)")
            continue
        out.append(f"{label} {_describe_saved(value)}")
    summary = tuple(out)
    if len(_summaries) < _DESCRIBED_LIMIT:
        return _summaries.setdefault(summary, summary)
    return _summaries.get(summary, summary)


def _packed(raw: Any) -> bool:
    """Is this raw saved value (or list of them) packed by a saved-tensors hook? Then reading
    `_saved_*` would run the unpack hook: a recomputation under non-reentrant checkpointing,
    a copy back from the CPU under save_on_cpu."""
    items = raw if isinstance(raw, (list, tuple)) else (raw,)
    return any(getattr(item, "unpack_hook", None) is not None for item in items)


_PLAIN = frozenset({int, float, bool, str, type(None)})


def _describe_saved(value: Any) -> str:
    """`_describe_saved_uncached`, remembered for plain values (never for anything holding a
    tensor: the cache must not keep a pass's tensors alive)."""
    kind = type(value)
    if isinstance(value, torch.Tensor):
        key: Any = (value.shape, value.dtype)
    elif kind in _PLAIN or (kind is tuple and all(type(v) is int for v in value)):
        key = (kind, value)
    else:
        return _describe_saved_uncached(value)
    text = _described.get(key)
    if text is not None:
        return text
    text = _describe_saved_uncached(value)
    if len(_described) >= _DESCRIBED_LIMIT:
        _described.clear()
    _described[key] = text
    return text


def _describe_saved_uncached(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        shape = ",".join(map(str, value.shape))
        return f"[{shape}] {str(value.dtype).removeprefix('torch.')}"
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
        return f"[{len(value)} tensors]"
    text = repr(saved_argument(value))
    return "= " + (text if len(text) <= 40 else text[:37] + "...")
