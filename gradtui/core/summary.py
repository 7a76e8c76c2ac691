"""Tensor statistics as plain data: what a gradient looks like without keeping the tensor.

`summarize` is on the hot path of every backward pass gradtui watches, so the cheap form
(no histogram) costs three reductions: aminmax, sum and a norm. The non-finite count is only
computed when those say something is not finite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

VALUES_LIMIT = 64
"""A tensor with at most this many elements has all of them in `Stats.values`."""

PREVIEW_LENGTH = 8
"""How many leading values a big tensor shows in `Stats.preview`."""

HISTOGRAM_BINS = 16


@dataclass(frozen=True, slots=True)
class Stats:
    """Statistics of one tensor: numbers and strings only, safe to send across threads."""

    shape: tuple[int, ...]
    dtype: str
    device: str
    norm: float
    min: float | None
    max: float | None
    mean: float | None
    """min, max and mean are None in light stats (only the norm was taken, see `summarize`)."""
    nonfinite: int
    values: tuple[float, ...] | None = None
    preview: tuple[float, ...] = ()
    """The first values: always for small tensors, for big ones only in a pause's stats."""
    histogram: tuple[int, ...] | None = None

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    def to_json(self) -> dict[str, Any]:
        """The report's STATS object (DESIGN.md); `values` only when the tensor is small."""
        out: dict[str, Any] = {
            "shape": list(self.shape),
            "dtype": self.dtype,
            "device": self.device,
            "norm": _json_float(self.norm),
            "min": _json_float(self.min),
            "max": _json_float(self.max),
            "mean": _json_float(self.mean),
            "nonfinite": self.nonfinite,
        }
        if self.values is not None:
            out["values"] = [_json_float(v) for v in self.values]
        return out


def _json_float(value: float | None) -> float | str | None:
    """JSON has no NaN or infinity: spell them as strings so the report stays valid JSON."""
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


_DTYPE_NAMES: dict[torch.dtype, str] = {}


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.float32` -> `float32`."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def summarize(tensor: torch.Tensor, histogram: bool = False, light: bool = False) -> Stats:
    """Summarize a tensor; with `histogram` (a pause), also bin it and preview its values.

    Without `histogram` this is the per-node hot path: three reductions read back with
    `.item()`, which is cheaper than stacking them, and no preview of big tensors. `light`
    takes only the norm (one pass over the data; a non-finite value makes it non-finite),
    for a pass running between pauses: min, max and mean are then None.
    """
    t = tensor.detach()  # cheaper than no_grad(): reductions of a detached tensor record nothing
    shape = tuple(t.shape)
    dtype = dtype_name(t.dtype)
    numel = t.numel()
    if t.layout != torch.strided:
        t = t.to_dense()
    if numel == 0:
        return Stats(shape, dtype, str(t.device), 0.0, 0.0, 0.0, 0.0, 0, values=())
    if t.is_complex():
        t = t.abs()
    if t.dtype not in (torch.float32, torch.float64):
        t = t.float()
    if light and numel > VALUES_LIMIT and not histogram:
        return _light(t, shape, dtype, numel)
    lo, hi = torch.aminmax(t)
    lo_v, hi_v = lo.item(), hi.item()
    total, norm = t.sum().item(), torch.linalg.vector_norm(t).item()
    if math.isfinite(lo_v) and math.isfinite(hi_v):  # aminmax propagates nan: all values finite
        nonfinite = 0
        if not (math.isfinite(total) and math.isfinite(norm)):  # float32 overflowed: redo wide
            wide = t.double()
            total, norm = wide.sum().item(), torch.linalg.vector_norm(wide).item()
    else:
        nonfinite = int(numel - torch.isfinite(t).sum().item())
    values = preview = None
    if numel <= VALUES_LIMIT:
        values = tuple(t.reshape(-1).tolist())
        preview = values[:PREVIEW_LENGTH]
    elif histogram:
        preview = tuple(t.reshape(-1)[:PREVIEW_LENGTH].tolist())
    hist = _histogram(t.reshape(-1), lo_v, hi_v, nonfinite) if histogram else None
    return Stats(shape, dtype, str(t.device), norm, lo_v, hi_v, total / numel, nonfinite, values,
                 preview or (), hist)


def _light(t: torch.Tensor, shape: tuple[int, ...], dtype: str, numel: int) -> Stats:
    norm = torch.linalg.vector_norm(t).item()
    nonfinite = 0
    if not math.isfinite(norm):
        nonfinite = int(numel - torch.isfinite(t).sum().item())
        if not nonfinite:  # float32 overflowed on finite values
            norm = torch.linalg.vector_norm(t.double()).item()
    return Stats(shape, dtype, str(t.device), norm, None, None, None, nonfinite)


def _histogram(flat: torch.Tensor, lo: float, hi: float, nonfinite: int) -> tuple[int, ...]:
    """Counts of the finite values in `HISTOGRAM_BINS` equal bins between min and max."""
    if nonfinite:
        flat = flat[torch.isfinite(flat)]
        if flat.numel() == 0:
            return (0,) * HISTOGRAM_BINS
        lo, hi = flat.min().item(), flat.max().item()
    if lo == hi:
        counts = [0] * HISTOGRAM_BINS
        counts[HISTOGRAM_BINS // 2] = flat.numel()
        return tuple(counts)
    if flat.dtype == torch.float32 and hi - lo > torch.finfo(torch.float32).max:
        flat = flat.double()  # the range would overflow in float32 and every count would be 0
    return tuple(int(c) for c in torch.histc(flat, bins=HISTOGRAM_BINS, min=lo, max=hi).tolist())


def any_nonfinite(grads: tuple[Stats | None, ...]) -> bool:
    """Does any of these gradients hold a NaN or an infinity?"""
    return any(s is not None and s.nonfinite for s in grads)


def summarize_all(grads: tuple[Any, ...] | list[Any], histogram: bool = False,
                  light: bool = False) -> tuple[Stats | None, ...]:
    """Summarize each gradient of a hook's tuple; `None` (no gradient) stays `None`."""
    return tuple(summarize(g, histogram, light) if isinstance(g, torch.Tensor) else None for g in grads)


def describe(value: Any) -> str:
    """One short line for any value `print EXPR` may return."""
    if isinstance(value, torch.Tensor):
        return format_stats(summarize(value))
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return "; ".join(f"[{i}] {format_stats(summarize(v))}" for i, v in enumerate(value))
    text = repr(value)
    return text if len(text) <= 400 else text[:397] + "..."


def format_number(value: float | None) -> str:
    """Compact number: 4 significant digits, `nan`/`inf` spelled out, `-` when not recorded."""
    if value is None:
        return "-"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.4g}"


def format_grads(grads: tuple[Stats | None, ...], phase: str) -> list[str]:
    """`in[0] [1] float32 cpu  norm 12 ...` per gradient of a pause (`out[i]` after a node ran)."""
    label = "in" if phase == "before" else "out"
    return [f"{label}[{i}] {format_stats(s)}" for i, s in enumerate(grads)]


def format_stats(stats: Stats | None) -> str:
    """A one-line human summary, as headless mode and the UI print it."""
    if stats is None:
        return "None"
    shape = "[" + ", ".join(str(d) for d in stats.shape) + "]"
    parts = [
        f"{shape} {stats.dtype} {stats.device}",
        f"norm {format_number(stats.norm)}",
        f"min {format_number(stats.min)}",
        f"max {format_number(stats.max)}",
        f"mean {format_number(stats.mean)}",
    ]
    if stats.nonfinite:
        parts.append(f"nonfinite {stats.nonfinite}")
    shown = stats.values if stats.values is not None and len(stats.values) <= PREVIEW_LENGTH else None
    if shown is not None:
        parts.append("values [" + ", ".join(format_number(v) for v in shown) + "]")
    return "  ".join(parts)
