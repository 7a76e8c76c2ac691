"""Tensor statistics: what a gradient looks like without keeping the tensor (`Stats`, in
gradtui.protocol.stats, is the plain-data result).

`summarize` is on the hot path of every backward pass gradtui watches, so the cheap form
(no histogram) costs min and max (`extremes`: one `aminmax`, or `amin` + `amax` on a CPU tensor
past 16K elements or not contiguous), a sum and a norm. The non-finite count is only computed
when those say something is not finite.

A tensor of more than `CHUNK` elements is read in chunks of `CHUNK` elements: each chunk's
reductions run while it is in cache (one trip through memory instead of three), their
partial results are combined in float64 (more accurate than one float32 reduction of 10^8
values), and whatever must be converted or copied (a half tensor widened, a non-contiguous
chunk flattened, the non-finite values masked out, a float32 overflow redone in float64, the
histogram's bin indices) is copied one chunk at a time, never the whole tensor. The
histogram is counted chunk by chunk in int64 (torch.histc counts in the tensor's dtype, so
float32 counts stop at 2**24), with histc's own arithmetic, so the counts are histc's.

Some gradients have no storage to read. A ZeroTensor (`t._is_zerotensor()`: what `sgn`, `abs`
at double backward and norms' subgradients send) is all zeros by definition and `.tolist()`
refuses it, so its statistics are those of zeros, computed without reading it. A meta or fake
tensor has no values at all: its statistics keep shape, dtype and device and say why the
rest is missing (`Stats.unreadable`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from typing import Any

import torch

from gradtui.engine.compat import is_zerotensor
from gradtui.engine.process.quitting import failure_text, raised_by_user
from gradtui.engine.stats.measures import (
    MAX,
    MIN,
    NAMES,
    ZEROS,
    combined,
    extremes,
    finished,
    made,
    measure,
)
from gradtui.protocol.stats import (
    HISTOGRAM_BINS,
    PREVIEW_LENGTH,
    VALUES_LIMIT,
    Stats,
    empty_stats,
    format_stats,
    light_stats,
    unreadable_stats,
)

CHUNK = 1 << 20
"""Tensors with more elements than this are summarized chunk by chunk, this many at a time."""

NORM_BLOCK = 1 << 12
"""A chunk's norm is taken per block of this many elements: torch's float32 norm of 10^6
values is off by ~1e-5 (of 10^8 values, by 1%), of 4,096 values by ~1e-8."""


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
    for a pass running between pauses: min, max and mean are then None. Tensors of more
    than `CHUNK` elements are read chunk by chunk (see the module doc).
    """
    t = local_shard(tensor).detach()  # detach: cheaper than no_grad(); reductions record nothing
    shape = tuple(t.shape)
    dtype = dtype_name(t.dtype)
    numel = t.numel()
    if numel == 0:
        return empty_stats(shape, dtype, str(t.device))
    if is_zerotensor(t):
        return _zeros(shape, dtype, str(t.device), numel, histogram, light)
    if (why := no_values(t)) is not None:
        return unreadable_stats(shape, dtype, str(t.device), why)
    if t.layout != torch.strided:
        t = t.to_dense()
    if numel > CHUNK:
        return _summarize_chunked(t, shape, dtype, numel, histogram, light)
    t = _as_real_float(t)
    if light and numel > VALUES_LIMIT and not histogram:
        return _light(t, shape, dtype, numel)
    got = [r.item() for r in measure(t)]  # every measured statistic (gradtui.engine.stats.measures)
    norm = torch.linalg.vector_norm(t).item()
    lo_v, hi_v = got[MIN], got[MAX]
    if math.isfinite(lo_v) and math.isfinite(hi_v):  # min and max propagate nan: all values finite
        nonfinite = 0
        if not (all(map(math.isfinite, got)) and math.isfinite(norm)):  # float32 overflowed: redo wide
            wide = t.double()  # at most CHUNK elements
            again = [r.item() for r in measure(wide)]
            got = [v if math.isfinite(v) else w for v, w in zip(got, again)]
            norm = torch.linalg.vector_norm(wide).item()
    else:
        nonfinite = int(numel - torch.isfinite(t).sum().item())
    values = preview = None
    if numel <= VALUES_LIMIT:
        values = tuple(t.reshape(-1).tolist())
        preview = values[:PREVIEW_LENGTH]
    elif histogram:
        preview = tuple(t.reshape(-1)[:PREVIEW_LENGTH].tolist())
    hist, finite_range = _histogram(t.reshape(-1), lo_v, hi_v, nonfinite) if histogram else (None, None)
    return made(
        shape, dtype, str(t.device), norm, finished(got, numel), nonfinite, values, preview or (), hist, finite_range
    )


def _zeros(shape: tuple[int, ...], dtype: str, device: str, numel: int, histogram: bool, light: bool) -> Stats:
    """What `summarize` gives for `numel` zeros, without reading them (a ZeroTensor has no storage)."""
    if light and numel > VALUES_LIMIT and not histogram:
        return light_stats(shape, dtype, device, 0.0, 0)
    values = (0.0,) * numel if numel <= VALUES_LIMIT else None
    preview = (0.0,) * min(numel, PREVIEW_LENGTH) if values is not None or histogram else ()
    return made(shape, dtype, device, 0.0, ZEROS, 0, values, preview, _one_bin(numel) if histogram else None)


def no_values(t: torch.Tensor) -> str | None:
    """Why `t` has no values to read (a meta tensor; a FakeTensor, torch.compile's tracing
    stand-in), or None. A ZeroTensor has values: all zeros."""
    if t.is_meta:
        return "a meta tensor has no values"
    fake = sys.modules.get("torch._subclasses.fake_tensor")  # no import: it exists only if torch loaded it
    if type(t) is not torch.Tensor and fake is not None and isinstance(t, fake.FakeTensor):
        return "a fake tensor has no values"
    if freed(t):
        return "its storage is freed (FSDP2 frees an unsharded parameter's after backward)"
    return None


def freed(t: torch.Tensor) -> bool:
    """Does `t` lack the storage its elements need? FSDP2 resizes an unsharded parameter's storage
    to 0 after backward and keeps the tensor: reading it would read freed memory (a crash)."""
    if (
        t.layout != torch.strided
        or (numel := t.numel()) == 0
        or type(t) not in _PLAIN_TENSORS
        and not isinstance(t, torch.nn.Parameter)
    ):
        return False
    try:
        # A contiguous tensor's elements span numel places (the common case, without a walk of its strides).
        extent = (
            numel if t.is_contiguous() else 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
        )
        return t.untyped_storage().nbytes() < (t.storage_offset() + extent) * t.element_size()
    except (RuntimeError, NotImplementedError):
        return False


def local_shard(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (never gathered: gathering is a collective that would need every
    rank to take part); any other tensor as it is."""
    if type(t) in _PLAIN_TENSORS:
        return t
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) and type(t).__name__ == "DTensor" else t


_PLAIN_TENSORS = frozenset({torch.Tensor, torch.nn.Parameter})


def _as_real_float(t: torch.Tensor) -> torch.Tensor:
    """Magnitudes of a complex tensor; anything not float32/float64 as float32."""
    if t.is_complex():
        t = t.abs()
    if t.dtype not in (torch.float32, torch.float64):
        t = t.float()
    return t


def _light(t: torch.Tensor, shape: tuple[int, ...], dtype: str, numel: int) -> Stats:
    norm = torch.linalg.vector_norm(t).item()
    nonfinite = 0
    if not math.isfinite(norm):
        nonfinite = int(numel - torch.isfinite(t).sum().item())
        if not nonfinite:  # float32 overflowed on finite values
            norm = torch.linalg.vector_norm(t.double()).item()
    return light_stats(shape, dtype, str(t.device), norm, nonfinite)


def _histogram(
    flat: torch.Tensor, lo: float, hi: float, nonfinite: int
) -> tuple[tuple[int, ...], tuple[float, float] | None]:
    """Counts of the finite values in `HISTOGRAM_BINS` equal bins between their min and max; and,
    where some values are not finite, that min and max (`Stats.finite_range`; None if none is)."""
    finite_range = None
    if nonfinite:
        flat = flat[torch.isfinite(flat)]
        if flat.numel() == 0:
            return (0,) * HISTOGRAM_BINS, None
        low, high = extremes(flat)
        lo, hi = low.item(), high.item()
        finite_range = (lo, hi)
    if lo == hi:
        return _one_bin(flat.numel()), finite_range
    if flat.dtype == torch.float32 and hi - lo > torch.finfo(torch.float32).max:
        flat = flat.double()  # the range would overflow in float32 and every count would be 0
    return tuple(int(c) for c in torch.histc(flat, bins=HISTOGRAM_BINS, min=lo, max=hi).tolist()), finite_range


def _one_bin(count: int) -> tuple[int, ...]:
    """The histogram of `count` equal values: all in the middle bin."""
    counts = [0] * HISTOGRAM_BINS
    counts[HISTOGRAM_BINS // 2] = count
    return tuple(counts)


# ---- tensors of more than CHUNK elements -------------------------------------------------


def _pieces(t: torch.Tensor, size: int) -> Iterator[torch.Tensor]:
    """Views of `t` that cover each of its elements once, each of at most `size` elements
    (whole rows of the leading dimension where they fit), without copying anything."""
    if t.numel() <= size:
        yield t
        return
    if t.is_contiguous():
        flat = t.view(-1)
        for start in range(0, flat.numel(), size):
            yield flat[start : start + size]
        return
    while t.dim() > 1 and t.shape[0] == 1:
        t = t[0]
    per_row = t.numel() // t.shape[0]
    if per_row <= size:
        step = size // per_row
        for start in range(0, t.shape[0], step):
            yield t[start : start + step]
    else:
        for row in t:
            yield from _pieces(row, size)


def _chunks(t: torch.Tensor) -> Iterator[torch.Tensor]:
    """`t` as flat, real float32/float64 chunks of at most CHUNK elements; a chunk that must be
    flattened or converted is copied on its own, so no copy is ever bigger than a chunk."""
    for piece in _pieces(t, CHUNK):
        yield _as_real_float(piece.reshape(-1))


def _head(t: torch.Tensor, count: int) -> tuple[float, ...]:
    """The first `count` values of `t` in row-major order, read without flattening `t`."""
    if t.is_contiguous():
        first = t.view(-1)[:count]
    else:
        flat_index = range(min(count, t.numel()))
        coords: list[list[int]] = [[] for _ in t.shape]
        for i in flat_index:
            for d in range(t.dim() - 1, -1, -1):
                i, r = divmod(i, t.shape[d])
                coords[d].append(r)
        first = t[tuple(torch.tensor(c) for c in coords)]
    return tuple(_as_real_float(first).tolist())


def _summarize_chunked(
    t: torch.Tensor, shape: tuple[int, ...], dtype: str, numel: int, histogram: bool, light: bool
) -> Stats:
    """`summarize` of a tensor of more than CHUNK elements: one trip through memory, partial
    results combined in float64, no copy bigger than a chunk."""
    device = str(t.device)
    f64 = torch.float64
    if light and not histogram:
        norms = [_block_norms(c) for c in _chunks(t)]
        norm = torch.linalg.vector_norm(torch.cat(norms).to(f64)).item()
        nonfinite = 0
        if not math.isfinite(norm):
            nonfinite = sum(_count_nonfinite(c) for c in _chunks(t))
            if not nonfinite:  # a chunk's float32 norm overflowed on finite values
                norm = _wide_norm(t)
        return light_stats(shape, dtype, device, norm, nonfinite)
    columns: list[list[torch.Tensor]] = [[] for _ in NAMES]
    """Per measured statistic (gradtui.engine.stats.measures), each chunk's result."""
    norms = []
    for c in _chunks(t):
        for column, result in zip(columns, measure(c)):
            column.append(result)
        norms.append(_block_norms(c))
    mins, maxs = columns[MIN], columns[MAX]
    chunk_mins, chunk_maxs = torch.stack(mins), torch.stack(maxs)
    got = list(combined(columns, numel))
    lo_v, hi_v = got[MIN], got[MAX]
    norm = torch.linalg.vector_norm(torch.cat(norms).to(f64)).item()
    bad: set[int] = set()
    """Chunks holding a non-finite value (min and max propagate nan; an infinity is a min or max)."""
    if math.isfinite(lo_v) and math.isfinite(hi_v):
        nonfinite = 0
        if not all(map(math.isfinite, got)):  # a chunk's float32 sum overflowed: redo in float64, chunk by chunk
            wide: list[list[torch.Tensor]] = [[] for _ in NAMES]
            for c in _chunks(t):
                for column, result in zip(wide, measure(c.to(f64))):  # one chunk's copy at a time
                    column.append(result)
            again = combined(wide, numel)
            got = [v if math.isfinite(v) else w for v, w in zip(got, again)]
        if not math.isfinite(norm):
            norm = _wide_norm(t)
    else:
        finite = torch.isfinite(chunk_mins) & torch.isfinite(chunk_maxs)
        bad = set(torch.nonzero(~finite).flatten().tolist())
        nonfinite = sum(_count_nonfinite(c) for i, c in enumerate(_chunks(t)) if i in bad)
    preview = _head(t, PREVIEW_LENGTH) if histogram else ()
    hist = finite_range = None
    if histogram:
        if bad:  # the range of the finite values: the other chunks' min and max, the bad ones' finite part
            lows = [m for i, m in enumerate(mins) if i not in bad]
            highs = [m for i, m in enumerate(maxs) if i not in bad]
            for i, c in enumerate(_chunks(t)):
                if i in bad and (finite_part := c[torch.isfinite(c)]).numel():
                    lo_c, hi_c = extremes(finite_part)
                    lows.append(lo_c)
                    highs.append(hi_c)
            if not lows:
                return made(shape, dtype, device, norm, got, nonfinite, None, preview, (0,) * HISTOGRAM_BINS)
            finite_range = (torch.stack(lows).min().item(), torch.stack(highs).max().item())
            hist = _chunked_histogram(t, *finite_range, numel - nonfinite, bad)
        else:
            hist = _chunked_histogram(t, lo_v, hi_v, numel, bad)
    return made(shape, dtype, device, norm, got, nonfinite, None, preview, hist, finite_range)


def _block_norms(c: torch.Tensor) -> torch.Tensor:
    """The norms of a flat chunk's blocks of NORM_BLOCK elements (and of its tail), as a 1-D tensor."""
    whole = c.numel() - c.numel() % NORM_BLOCK
    if whole == 0:
        return torch.linalg.vector_norm(c).reshape(1)
    norms = torch.linalg.vector_norm(c[:whole].view(-1, NORM_BLOCK), dim=1)
    if whole == c.numel():
        return norms
    return torch.cat((norms, torch.linalg.vector_norm(c[whole:]).reshape(1)))


def _count_nonfinite(c: torch.Tensor) -> int:
    return c.numel() - int(torch.count_nonzero(torch.isfinite(c)))


def _wide_norm(t: torch.Tensor) -> float:
    """The norm computed in float64, one chunk at a time (float32 overflowed on finite values)."""
    norms = [torch.linalg.vector_norm(c.to(torch.float64)) for c in _chunks(t)]
    return torch.linalg.vector_norm(torch.stack(norms)).item()


def _chunked_histogram(t: torch.Tensor, lo: float, hi: float, finite: int, bad: set[int]) -> tuple[int, ...]:
    """`_histogram` chunk by chunk, between the finite `lo` and `hi`, of the `finite` finite
    values (the chunks numbered in `bad` hold the others): int64 counts, each chunk binned with
    histc's arithmetic (`(x - lo) * bins / (hi - lo)` truncated, `hi` in the last bin) in two
    buffers reused from chunk to chunk."""
    if lo == hi:
        return _one_bin(finite)
    counts = torch.zeros(HISTOGRAM_BINS, dtype=torch.int64)
    buffers: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor, float]] = {}
    for i, c in enumerate(_chunks(t)):
        if i in bad:
            c = c[torch.isfinite(c)]
        wanted = c.dtype
        if wanted == torch.float32 and hi - lo > torch.finfo(torch.float32).max:
            wanted = torch.float64  # the range overflows float32: bin in float64
        if wanted not in buffers:
            span = (torch.tensor(hi, dtype=wanted) - torch.tensor(lo, dtype=wanted)).item()  # as histc has it
            buffers[wanted] = (torch.empty(CHUNK, dtype=wanted), torch.empty(CHUNK, dtype=torch.int32), span)
        position, bins, span = buffers[wanted]
        position, bins = position[: c.numel()], bins[: c.numel()]
        torch.sub(c.to(wanted), lo, out=position)
        position.mul_(HISTOGRAM_BINS).div_(span).clamp_(max=HISTOGRAM_BINS - 1)
        bins.copy_(position)  # truncates, as histc's cast does
        counts += torch.bincount(bins, minlength=HISTOGRAM_BINS)
    return tuple(int(c) for c in counts.tolist())


def summarize_all(
    grads: tuple[Any, ...] | list[Any], histogram: bool = False, light: bool = False
) -> tuple[Stats | None, ...]:
    """Summarize each gradient of a hook's tuple; `None` (no gradient) stays `None`."""
    return tuple(summarize(g, histogram, light) if isinstance(g, torch.Tensor) else None for g in grads)


def describe(value: Any) -> str:
    """One short line for any value `print EXPR` may return; a value that cannot be shown (its
    `__repr__` raises, even a BaseException) says so instead of ending the run."""
    try:
        return _describe(value)
    except BaseException as exc:
        if not raised_by_user(exc):
            raise
        return f"<a {type(value).__name__} that cannot be shown: {failure_text(exc)}>"


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        if local_shard(value) is not value:
            placements = ", ".join(str(p) for p in getattr(value, "placements", ()))
            return (
                f"DTensor, this rank's local shard ({placements}; global shape {list(value.shape)}): "
                + format_stats(summarize(value))
            )
        return format_stats(summarize(value))
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return "; ".join(f"[{i}] {format_stats(summarize(v))}" for i, v in enumerate(value))
    text = repr(value)
    return text if len(text) <= 400 else text[:397] + "..."
