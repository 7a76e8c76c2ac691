"""The sign sketch of one value (gradtui.engine.fingerprint's fingerprints).

A value's sketch is a sign sketch: its elements, in row-major order, multiplied by fixed
pseudo-random signs s_i = ±1 (a hash of the position i: the same in every run, process, device
and torch version), summed by position modulo the prime `BUCKETS`, and those buckets summed
into `K` entries by a fixed pseudo-random balanced map g, beside its norm:

    S_j(x) = sum over i with g(i mod BUCKETS) = j of s_i x_i.

The sketch is linear, so S(a) - S(b) = S(a - b), and E ‖S(d)‖² = ‖d‖² (the signs of two
elements in one entry are independent): two recordings alone tell how far apart two values
are (`estimate_distance`), like Gaussian directions would, at the cost of one read of the value
(a Gaussian sketch reads a K-times larger direction matrix). The prime spreads a difference
confined to a few neighbouring elements, a row or a column over every entry. A value of at
most `EXACT_LIMIT` elements is kept whole instead (the comparison is then exact). A value of
more than `CHUNK` elements is sketched chunk by chunk, each chunk's entries with a sign of
their own (still unbiased; the sign vector kept is one chunk's).

Cost (CPU, measured with scripts/bench_diff.py): a value is sketched by three device ops into
a scratch buffer kept per dtype, device and thread (the signed product, its bucket sums, its
norm), and the fold of the buckets into K entries waits for the read of the whole pass
(`read_rows`: one gather and one sum for every row). A Gaussian sketch (the value times a
cached (n, K) direction matrix, one matmul) reads K + 1 times the value's size: 1.8x-2.6x the
time of this one per tensor at d=256 sizes. A transposed matrix (the weight gradients mm sends)
is copied by torch's blocked transpose first: read across its rows, the product missed the
cache (2.2x slower).
"""

from __future__ import annotations

import math
import threading
from typing import NamedTuple

import torch

K = 8
"""Entries per sketch."""

EXACT_LIMIT = 64
"""A value of at most this many elements is recorded whole (compared exactly)."""

CHUNK = 1 << 20
"""A value of more elements is sketched chunk by chunk (the signs kept are one chunk's)."""

BUCKETS = 251
"""Positions are summed modulo this prime first (a column of a matrix whose width is a multiple
of K would otherwise fall in one bucket), then the buckets into the K entries."""

_MASK = (1 << 32) - 1
_group_maps: dict[torch.device, torch.Tensor] = {}
_group_index: torch.Tensor | None = None
_signs: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}
_chunk_signs: dict[int, torch.Tensor] = {}


def hashed_signs(count: int, salt: int = 0, bits: bool = False) -> torch.Tensor:
    """±1 (float64, CPU) for positions 0..count-1: an integer hash of position and salt, done
    in int64 arithmetic that cannot overflow, so the same on every machine and torch version
    (`bits`: the 32-bit hashes themselves)."""
    x = (torch.arange(count, dtype=torch.int64) * 2654435761 + salt * 0x632BE5AB + 0x6772) & _MASK
    for _ in range(2):
        x = ((x ^ (x >> 16)) * 0x45D9F3B) & _MASK
    x = x ^ (x >> 16)
    if bits:
        return x
    return ((x >> 7) & 1).double() * 2 - 1


def signs(count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The first `count` (at most CHUNK) signs, in `dtype` on `device` (one chunk's kept per both)."""
    found = _signs.get((dtype, device))
    if found is None:
        found = _signs[(dtype, device)] = hashed_signs(CHUNK).to(dtype=dtype, device=device)
    return found[:count]


_scratches: dict[tuple[torch.dtype, torch.device, int], torch.Tensor] = {}


def _scratch(count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The first `count` (at most CHUNK) elements of a buffer kept per dtype, device and thread,
    whose elements from `count` up to the next multiple of BUCKETS are zero (so its bucket sums
    are one reduction over whole rows)."""
    key = (dtype, device, threading.get_ident())
    found = _scratches.get(key)
    if found is None:
        found = _scratches[key] = torch.empty(CHUNK + BUCKETS, dtype=dtype, device=device)
    whole = -(-count // BUCKETS) * BUCKETS
    if whole > count:
        found[count:whole].zero_()
    return found[:count]


def _padded_buckets(signed: torch.Tensor) -> torch.Tensor:
    """The bucket sums of a `_scratch` buffer's first elements (its zero tail summed along)."""
    rows = -(-signed.numel() // BUCKETS)
    return signed.as_strided((rows, BUCKETS), (BUCKETS, 1)).sum(0)


def _sign_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype a value is sketched in: float64 for float64, else float32 (halves, integers, masks)."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def group_of_bucket() -> torch.Tensor:
    """(BUCKETS,) int64: which of the K sketch entries each bucket adds to. A pseudo-random
    balanced assignment (a hash's order), so no arithmetic run of buckets lands in one entry."""
    global _group_index
    if _group_index is None:
        order = torch.argsort(hashed_signs(BUCKETS, salt=2, bits=True), stable=True)
        groups = torch.empty(BUCKETS, dtype=torch.int64)
        groups[order] = torch.arange(BUCKETS) % K
        _group_index = groups
    return _group_index


_WIDTH = -(-BUCKETS // K)
"""Buckets per entry, at most (the last few entries have one fewer)."""


def _gather(device: torch.device) -> torch.Tensor:
    """(K * _WIDTH,) int64: the buckets of entry 0, then of entry 1..., each padded with the
    index BUCKETS (a zero appended to the bucket sums), in ascending order (cached)."""
    found = _group_maps.get(device)
    if found is None:
        groups = group_of_bucket()
        index = torch.full((K, _WIDTH), BUCKETS, dtype=torch.int64)
        for j in range(K):
            members = torch.nonzero(groups == j).view(-1)
            index[j, :members.numel()] = members
        found = _group_maps[device] = index.view(-1).to(device)
    return found


def _buckets(signed: torch.Tensor) -> torch.Tensor:
    """A contiguous 1-D signed value summed into BUCKETS buckets by position (one read: a
    reduction over the rows of a (rows, BUCKETS) view, the tail added to the first buckets)."""
    n = signed.numel()
    rows = n // BUCKETS
    whole = rows * BUCKETS
    sums = signed[:whole].view(rows, BUCKETS).sum(0)
    if whole < n:
        sums[:n - whole] += signed[whole:]
    return sums


def fold(buckets: torch.Tensor) -> torch.Tensor:
    """Bucket sums ((rows, BUCKETS) or (BUCKETS,)) summed into the K sketch entries: a gather and
    a sum over each entry's buckets, for all rows at once. Each row's result is the same bits
    however many rows are folded with it (a live run folds a node's rows, its reference a pass's)."""
    rows = buckets.view(-1, BUCKETS)
    padded = torch.nn.functional.pad(rows, (0, 1))
    entries = padded.index_select(1, _gather(buckets.device)).view(-1, K, _WIDTH).sum(-1)
    return entries.view(K) if buckets.dim() == 1 else entries


def _real(t: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(t) if t.is_complex() else t


def buckets_and_norm(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(bucket sums, norm) of one tensor of more than EXACT_LIMIT elements, on its device: the
    sketch before its fold into K entries (`fold`, done for a whole pass at once). Three device
    ops for a value of at most CHUNK elements (the signed product is the one temporary; its
    norm is `t`'s)."""
    t = _real(t.detach())
    numel = t.numel()
    dtype = _sign_dtype(t)
    if numel <= CHUNK:
        # Signs first: the product is laid out row-major whatever `t`'s strides are.
        signed = _scratch(numel, dtype, t.device)
        if t.dim() == 2 and t.stride() == (1, t.shape[0]) and t.shape[0] > 1 and t.shape[1] > 1:
            # a transposed matrix (a weight's gradient from mm): torch's blocked transpose copy
            # first, then a contiguous product; read across its rows the product misses the cache
            signed.view(t.shape).copy_(t)
            signed.mul_(signs(numel, dtype, t.device))
        else:
            torch.mul(signs(numel, dtype, t.device).view(t.shape), t, out=signed.view(t.shape))
        return _padded_buckets(signed), torch.linalg.vector_norm(signed)
    flat = t.reshape(-1)
    chunks = -(-numel // CHUNK)
    found = _chunk_signs.get(chunks)
    if found is None:
        # each chunk's K entries get a sign of their own: as bucket signs (the fold is one-hot)
        found = _chunk_signs[chunks] = hashed_signs(chunks * K, salt=1).view(chunks, K)[:, group_of_bucket()]
    per_chunk = found.to(dtype=dtype, device=t.device)
    total = torch.zeros(BUCKETS, dtype=dtype, device=t.device)
    squares = torch.zeros((), dtype=dtype, device=t.device)
    for c in range(chunks):
        part = flat[c * CHUNK:(c + 1) * CHUNK]
        signed = torch.mul(signs(part.numel(), dtype, t.device), part)
        total += _buckets(signed) * per_chunk[c]
        squares += torch.linalg.vector_norm(signed) ** 2
    return total, squares.sqrt()


def sketch_and_norm(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sketch, norm) of one tensor of more than EXACT_LIMIT elements, on its device."""
    buckets, norm = buckets_and_norm(t)
    return fold(buckets), norm


def sketch_one(t: torch.Tensor) -> torch.Tensor:
    """The K-element sketch of one tensor (of any size), on its device."""
    return sketch_and_norm(t)[0]


def estimate_distance(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """‖x - y‖ estimated from the sketches `a` and `b` of x and y (see module doc)."""
    return math.dist(a, b)


class Row(NamedTuple):
    """One value's fingerprint on its device: its norm (0-dim) and its body (1-D): the values
    themselves (`exact`) or its bucket sums, folded into the sketch when read (`read_rows`)."""

    norm: torch.Tensor
    body: torch.Tensor
    exact: bool


class ReadRow(NamedTuple):
    """One value's fingerprint read back: its norm, and its values (exact) or its K-entry sketch."""

    norm: float
    data: tuple[float, ...]


def fingerprint(t: torch.Tensor) -> Row:
    """A plain tensor's fingerprint, left on its device."""
    with torch.no_grad():
        if t.numel() <= EXACT_LIMIT:
            real = _real(t.detach())
            flat = real.reshape(-1).to(_sign_dtype(real))
            return Row(torch.linalg.vector_norm(flat), flat, True)
        body, norm = buckets_and_norm(t)
        return Row(norm, body, False)


def read_rows(rows: list[Row]) -> list[ReadRow]:
    """Many fingerprints brought to the host in one read: every sketched row's buckets folded by
    one gather and sum (`fold`), then norms, sketches and exact values in one `tolist`."""
    if not rows:
        return []
    with torch.no_grad():
        sketched = [r.body for r in rows if not r.exact]
        exact = [r.body for r in rows if r.exact]
        parts = [torch.stack([r.norm for r in rows])]  # stack and cat promote float32 with float64
        if sketched:
            parts.append(fold(torch.stack(sketched)).view(-1))
        if exact:
            parts.append(torch.cat(exact))
        numbers = (torch.cat(parts) if len(parts) > 1 else parts[0]).tolist()
    out = []
    folded, values = len(rows), len(rows) + K * len(sketched)
    for i, r in enumerate(rows):
        if r.exact:
            length = r.body.numel()
            out.append(ReadRow(numbers[i], tuple(numbers[values:values + length])))
            values += length
        else:
            out.append(ReadRow(numbers[i], tuple(numbers[folded:folded + K])))
            folded += K
    return out
