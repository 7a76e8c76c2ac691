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
"""

from __future__ import annotations

import math
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
_ones_cache: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}
_group_maps: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}
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


def _sign_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype a value is sketched in: float64 for float64, else float32 (halves, integers, masks)."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _groups(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(BUCKETS, K) one-hot: which of the K sketch entries each bucket adds to. A pseudo-random
    balanced assignment (a hash's order), so no arithmetic run of buckets lands in one entry."""
    found = _group_maps.get((dtype, device))
    if found is None:
        order = torch.argsort(hashed_signs(BUCKETS, salt=2, bits=True), stable=True)
        groups = torch.empty(BUCKETS, dtype=torch.int64)
        groups[order] = torch.arange(BUCKETS) % K
        found = _group_maps[(dtype, device)] = torch.nn.functional.one_hot(groups, K).to(dtype=dtype, device=device)
    return found


def _ones(count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """`count` (at most CHUNK // BUCKETS) ones, cached per dtype and device."""
    found = _ones_cache.get((dtype, device))
    if found is None:
        found = _ones_cache[(dtype, device)] = torch.ones(CHUNK // BUCKETS + 1, dtype=dtype, device=device)
    return found[:count]


def _fold(signed: torch.Tensor) -> torch.Tensor:
    """A contiguous 1-D signed value summed into BUCKETS buckets by position, then into K."""
    n = signed.numel()
    rows = n // BUCKETS
    whole = rows * BUCKETS
    sums = _ones(rows, signed.dtype, signed.device) @ signed[:whole].view(rows, BUCKETS)  # a gemv: one read
    if whole < n:
        sums[:n - whole] += signed[whole:]
    return sums @ _groups(sums.dtype, sums.device)


def _real(t: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(t) if t.is_complex() else t


def sketch_and_norm(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sketch, norm) of one tensor of more than EXACT_LIMIT elements, on its device, with no
    copy of a contiguous value (the signed product is the one temporary; its norm is `t`'s)."""
    t = _real(t.detach())
    numel = t.numel()
    dtype = _sign_dtype(t)
    if numel <= CHUNK:
        # Signs first: the product is laid out row-major whatever `t`'s strides are.
        signed = torch.mul(signs(numel, dtype, t.device).view(t.shape), t)
        return _fold(signed.view(-1)), torch.linalg.vector_norm(signed)
    flat = t.reshape(-1)
    chunks = -(-numel // CHUNK)
    found = _chunk_signs.get(chunks)
    if found is None:
        found = _chunk_signs[chunks] = hashed_signs(chunks * K, salt=1).view(chunks, K)
    per_chunk = found.to(dtype=dtype, device=t.device)
    total = torch.zeros(K, dtype=dtype, device=t.device)
    squares = torch.zeros((), dtype=dtype, device=t.device)
    for c in range(chunks):
        part = flat[c * CHUNK:(c + 1) * CHUNK]
        signed = torch.mul(signs(part.numel(), dtype, t.device), part)
        total += _fold(signed) * per_chunk[c]
        squares += torch.linalg.vector_norm(signed) ** 2
    return total, squares.sqrt()


def sketch_one(t: torch.Tensor) -> torch.Tensor:
    """The K-element sketch of one tensor (of any size), on its device."""
    return sketch_and_norm(t)[0]


def estimate_distance(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """‖x - y‖ estimated from the sketches `a` and `b` of x and y (see module doc)."""
    return math.dist(a, b)


class Row(NamedTuple):
    """One value's fingerprint on its device: its norm (0-dim) and its sketch or values (1-D)."""

    norm: torch.Tensor
    body: torch.Tensor
    exact: bool


def fingerprint(t: torch.Tensor) -> Row:
    """A plain tensor's fingerprint, left on its device."""
    with torch.no_grad():
        if t.numel() <= EXACT_LIMIT:
            real = _real(t.detach())
            flat = real.reshape(-1).to(_sign_dtype(real))
            return Row(torch.linalg.vector_norm(flat), flat, True)
        body, norm = sketch_and_norm(t)
        return Row(norm, body, False)
