"""The sign sketch of one value (gradtui.engine.fingerprints.values's fingerprints), version 3.

A value is sketched as a matrix: its 2-D form (`shape2d`: elements / last dimension by the
last dimension; a vector is one row). Its elements are multiplied by fixed pseudo-random signs
(an integer hash of each element's position in the *canonical* orientation, the long side
first: the same in every run, process, device and torch version), summed into a grid of at most
GRID x GRID buckets by (row mod GRID, column mod GRID), and the buckets into `K` entries by a
fixed pseudo-random balanced map, beside its norm. A square's sign and bucket of (i, j) are
those of (j, i) (the fold adds the grid to its transpose). So a matrix and its transpose have
the same pattern transposed: `sketch(a.t()) == sketch(a)` bit for bit, and a transposed matrix
(the weight gradients mm sends, `w.t()`) is reduced in its memory order with no copy; a view
that keeps the last dimension keeps the 2-D form, and the sketch. What a `TBackward0` or a
view sends on and the weight's accumulator receives is therefore not read again
(gradtui.engine.fingerprints.values).

The sketch is linear, so S(a) - S(b) = S(a - b), and E ‖S(d)‖² = ‖d‖² (the signs of two
elements in one entry are independent): two recordings alone tell how far apart two values
are (gradtui.protocol.fingerprints.estimate_distance), like Gaussian directions would, at the
cost of one read of the value (a Gaussian sketch reads a K-times larger direction matrix).
The prime grid spreads a difference confined to a row, a column or a block over every entry. A value of at most `EXACT_LIMIT`
elements is kept whole instead (the comparison is then exact). A value of more than `CHUNK`
elements is sketched row-major chunk by chunk, each chunk's entries with a sign of their own
(still unbiased; not the same for its transpose).

The versions (`SKETCH_VERSION`, stored in a recording): 1 was row-major; 2 is the map above
summed in the value's own float32 by a dozen torch calls (their order fixed its bits); 3 is the
same map with its arithmetic defined instead of its order: each element taken as float32
(float64 for a float64 value; a half, an integer or a mask made float32), times its sign
(exact), every sum (cells, entries, the squares of the norm) in float64, the entries and the
norm rounded to float32 (kept float64 for a float64 value) at the end. Two orders of float64 sums
differ by about 1e-16 relative, far below float32's rounding: the compiled posthooks' one-read
kernel (native/sketch.h: AVX2 where the CPU has it, a scalar loop with the same lanes otherwise),
and this module's Python code (a few torch calls, in another order, on any device) give the same
float32 numbers, at most a last bit apart at the rarest rounding tie (a float64 value's agree to
float64 rounding). So a process without the compiled library makes sketch 3 too. Version 3's
numbers differ from version 2's by float32 rounding (about 1e-7 relative): recordings of two
versions are not compared by their fingerprints (gradtui.record.compare says so).

Cost (CPU, benchmarks/bench_diff.py): the compiled kernel reads each value once (a view whose
rows are runs, heads split, in place; one read through other strides is first copied in its 2-D
form's order, a value not float32 or float64 first made float32). This Python code writes the
signed value in float64 into a scratch buffer, sums the grid's row blocks (a product with ones),
the small rest by column blocks into its cells, adds the cells into the entries, and takes the
norm of the same buffer: a few device ops. A transposed matrix costs what a contiguous one does.
Since a matrix and its transpose cannot both keep a row-major pattern (no pattern of the linear
index is the same under every transpose), a view that changes the last dimension (heads split)
changes the 2-D form: its consumer sketches anew.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import NamedTuple

import torch

from gradtui.protocol.events import SKETCH_VERSION  # noqa: F401 - the version of the sketch made here

K = 8
"""Entries per sketch."""

EXACT_LIMIT = 64
"""A value of at most this many elements is recorded whole (compared exactly)."""

CHUNK = 1 << 20
"""A value of more elements is sketched chunk by chunk (the signs kept are one chunk's)."""

BUCKETS = 251
"""A value of more than CHUNK elements is summed by row-major position modulo this prime first
(a column of a matrix whose width is a multiple of K would otherwise fall in one bucket), then
the buckets into the K entries."""

_MASK = (1 << 32) - 1
_group_maps: dict[torch.device, torch.Tensor] = {}
_group_index: torch.Tensor | None = None
_signs: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}
_chunk_signs: dict[int, torch.Tensor] = {}


def hashed_signs(count: int, salt: int = 0, bits: bool = False) -> torch.Tensor:
    """±1 (float64, CPU) for positions 0..count-1: an integer hash of position and salt, done
    in int64 arithmetic that cannot overflow, so the same on every machine and torch version
    (`bits`: the 32-bit hashes themselves)."""
    return _hash_signs(torch.arange(count, dtype=torch.int64), salt, bits)


def signs(count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The first `count` (at most CHUNK) signs, in `dtype` on `device` (one chunk's kept per both)."""
    found = _signs.get((dtype, device))
    if found is None:
        found = _signs[(dtype, device)] = hashed_signs(CHUNK).to(dtype=dtype, device=device)
    return found[:count]


_scratches: dict[tuple[torch.dtype, torch.device, int], torch.Tensor] = {}


def _scratch(count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The first `count` elements of a buffer kept per dtype, device and thread (grown as needed):
    where a value's signed product is written."""
    key = (dtype, device, threading.get_ident())
    found = _scratches.get(key)
    if found is None or found.numel() < count:
        found = _scratches[key] = torch.empty(max(count, 1 << 16), dtype=dtype, device=device)
    return found[:count]


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
            index[j, : members.numel()] = members
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
        sums[: n - whole] += signed[whole:]
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


GRID = 17
"""A value is summed into a grid of at most GRID x GRID buckets by (row mod, column mod) of its
2-D form (a prime: no power-of-two period of a model's widths falls into one bucket)."""


class Grid(NamedTuple):
    """How a value whose memory holds an (R, C) matrix row-major is sketched (cached per (R, C)):
    its signs in that memory order (in the value's sketch dtype), the grid's size, the fold: for
    each bucket (cell), the K entry it adds to, one-hot ((grid rows * grid columns, K), as the
    compiled sketch reads it), the same as `entry` (each cell's entry: on the CPU the cells are
    added into their entries in order) and as `gather`: (K, width) indices of each entry's
    cells, padded with the index one past the last cell (a zero appended), whose rows are summed
    on other devices (where an index_add's order could vary run to run). Either way a NaN or
    infinity in one cell reaches its own entry only."""

    signs: torch.Tensor
    rows: int
    cols: int
    fold: torch.Tensor
    entry: torch.Tensor
    gather: torch.Tensor


def shape2d(shape: tuple[int, ...]) -> tuple[int, int]:
    """The 2-D form a value is sketched as: (elements / last dimension, last dimension); a
    vector is one row. A view that keeps the last dimension keeps it (and its sketch)."""
    if len(shape) < 2:
        return (1, shape[0] if shape else 1)
    last = shape[-1]
    return (math.prod(shape) // last if last else 0, last)


def _hash_signs(index: torch.Tensor, salt: int, bits: bool = False) -> torch.Tensor:
    """±1 (float64) for each int64 position in `index`: an integer hash of position and salt
    (`bits`: the 32-bit hashes themselves; see hashed_signs)."""
    x = (index * 2654435761 + salt * 0x632BE5AB + 0x6772) & _MASK
    for _ in range(2):
        x = ((x ^ (x >> 16)) * 0x45D9F3B) & _MASK
    x = x ^ (x >> 16)
    if bits:
        return x
    return ((x >> 7) & 1).double() * 2 - 1


_linear: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


def _linear_signs(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """CHUNK signs of the positions 0, 1... (salt 3): the signs of every matrix held in its
    canonical orientation are this table's first elements (one table, its start hot in cache)."""
    found = _linear.get((dtype, device))
    if found is None:
        found = _linear[(dtype, device)] = _hash_signs(torch.arange(CHUNK, dtype=torch.int64), salt=3).to(
            dtype=dtype, device=device
        )
    return found


_grids: dict[tuple[int, int, torch.dtype, torch.device], Grid] = {}
_grid_elements = [0]
GRID_CACHE = 1 << 25
"""Sign elements kept in cached grids at most (a new shape past it empties the cache)."""


def grid(rows: int, cols: int, dtype: torch.dtype, device: torch.device) -> Grid:
    """The Grid of a value held row-major as (rows, cols) (see module doc): cell (i, j) of the
    canonical (second side first) orientation has the sign of its position there, the same cell
    seen transposed the same; a square's sign of (i, j) is that of (min, max), so a matrix and
    its transpose have one sketch. Held canonically (a flipped matrix, a weight's gradient) its
    signs are the first elements of one shared table; else, and for a square, a table of its own.
    Cached per shape, dtype and device."""
    key = (rows, cols, dtype, device)
    found = _grids.get(key)
    if found is not None:
        return found
    flipped = rows < cols  # held in the other orientation than the canonical (the long side first)
    first, second = (cols, rows) if flipped else (rows, cols)  # the canonical shape
    if first == second:
        i = torch.arange(first, dtype=torch.int64).view(-1, 1)
        j = torch.arange(second, dtype=torch.int64).view(1, -1)
        signs = _hash_signs(torch.minimum(i, j) * second + torch.maximum(i, j), salt=3).to(dtype=dtype, device=device)
    elif flipped:
        signs = _linear_signs(dtype, device)[: rows * cols].view(cols, rows).t().contiguous()
    else:  # held in the canonical orientation: the shared table's first elements (hot in cache)
        signs = _linear_signs(dtype, device)[: rows * cols].view(rows, cols)
    gs, gl = min(first, GRID), min(second, GRID)
    a = torch.arange(gs).view(-1, 1)
    b = torch.arange(gl).view(1, -1)
    cell = torch.minimum(a, b) * gl + torch.maximum(a, b) if first == second else a * gl + b
    order = torch.argsort(hashed_signs(gs * gl, salt=4, bits=True), stable=True)
    entry = torch.empty(gs * gl, dtype=torch.int64)
    entry[order] = torch.arange(gs * gl) % K
    entries = entry[cell]
    if flipped:
        entries = entries.t()
    flat = entries.reshape(-1)
    fold = torch.nn.functional.one_hot(flat, K).to(dtype)
    members = [torch.nonzero(flat == k).view(-1) for k in range(K)]
    gather = torch.full((K, max(m.numel() for m in members)), flat.numel(), dtype=torch.int64)
    for k, m in enumerate(members):
        gather[k, : m.numel()] = m
    if _grid_elements[0] + signs.numel() + fold.numel() > GRID_CACHE:
        _grids.clear()
        _grid_elements[0] = 0
    found = _grids[key] = Grid(
        signs, entries.shape[0], entries.shape[1], fold.to(device), flat.to(device), gather.to(device)
    )
    _grid_elements[0] += (signs.numel() if flipped or first == second else 0) + fold.numel()
    return found


def _memory2d(t: torch.Tensor) -> torch.Tensor:
    """`t` as the 2-D matrix its memory holds row-major where it is one (contiguous in its 2-D
    form, or a transposed matrix: `w.t()`, the weight gradients mm sends), else its 2-D form
    (read through its strides)."""
    rows, cols = shape2d(tuple(t.shape))
    if t.dim() == 2 and t.stride() == (1, rows) and rows > 1 and cols > 1:
        return t.t()
    return t.reshape(rows, cols) if t.is_contiguous() else t.view(rows, cols) if t.dim() == 2 else t


def buckets_and_norm(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(K-entry sketch, norm) of one tensor of more than EXACT_LIMIT elements, on its device:
    sketch 3 (see the module doc), made in Python (the compiled posthooks make it in one read).
    At most CHUNK elements: the value in its memory order times the cached signs of that order,
    written in float64 into a scratch buffer, a sum over the grid's row blocks (a product with
    ones), the small (grid rows, columns) rest summed by column blocks into its cells, the cells
    added into the K entries (`Grid.entry`; `Grid.gather` off the CPU), the norm taken of the
    same buffer; both rounded to the value's sketch dtype. No copy of a transposed matrix, and a
    matrix and its transpose (`mm`'s weight gradient, what `TBackward0` sends on) have the same
    sketch, bit for bit."""
    t = _real(t.detach())
    dtype = _sign_dtype(t)
    if t.numel() > CHUNK:
        buckets, norm = _chunked(t, dtype)
        return fold(buckets).to(dtype), norm.to(dtype)
    held = _memory2d(t)
    rows, cols = held.shape if held.dim() == 2 else shape2d(tuple(t.shape))
    g = grid(rows, cols, dtype, t.device)
    flat = _scratch(rows * cols, torch.float64, t.device)
    target = flat.view(rows, cols)
    if held.dim() == 2:  # exact: a float times a sign, widened to float64
        torch.mul(held, g.signs, out=target)
    else:  # strided: read through its strides in its 2-D form's order
        torch.mul(held, g.signs.view(held.shape), out=target.view(held.shape))
    blocks, rest = divmod(rows, g.rows)
    whole = blocks * g.rows * cols
    if blocks > 1:
        part = _ones(blocks, t.device) @ flat[:whole].view(blocks, -1)
        if rest:
            part[: rest * cols] += flat[whole:]
    elif rest:
        part = flat[: g.rows * cols].clone()
        part[: rest * cols] += flat[g.rows * cols :]
    else:
        part = flat
    padded = -(-cols // g.cols) * g.cols  # the column blocks
    part = part.view(g.rows, cols)
    if padded > cols:
        part = torch.nn.functional.pad(part, (0, padded - cols))
    cells = part.view(g.rows, padded // g.cols, g.cols).sum(1).view(-1)
    if t.device.type == "cpu":  # added in the cells' order
        entries = torch.zeros(K, dtype=torch.float64).index_add_(0, g.entry, cells)
    else:
        entries = torch.nn.functional.pad(cells, (0, 1)).index_select(0, g.gather.view(-1)).view(K, -1).sum(1)
    return entries.to(dtype), torch.linalg.vector_norm(target).to(dtype)


_ones_cache: dict[tuple[int, torch.device], torch.Tensor] = {}


def _ones(count: int, device: torch.device) -> torch.Tensor:
    """A cached float64 vector of `count` ones (a sum over rows as one matrix-vector product)."""
    key = (count, device)
    found = _ones_cache.get(key)
    if found is None:
        found = _ones_cache[key] = torch.ones(count, dtype=torch.float64, device=device)
    return found


def _chunked(t: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(bucket sums, norm) in float64 of a value of more than CHUNK elements, row-major (a
    transposed one is read through its strides): each chunk's BUCKETS sums with a sign of their own."""
    numel = t.numel()
    flat = t.reshape(-1)
    chunks = -(-numel // CHUNK)
    found = _chunk_signs.get(chunks)
    if found is None:
        # each chunk's K entries get a sign of their own: as bucket signs (the fold is one-hot)
        found = _chunk_signs[chunks] = hashed_signs(chunks * K, salt=1).view(chunks, K)[:, group_of_bucket()]
    per_chunk = found.to(dtype=torch.float64, device=t.device)
    total = torch.zeros(BUCKETS, dtype=torch.float64, device=t.device)
    squares = torch.zeros((), dtype=torch.float64, device=t.device)
    for c in range(chunks):
        part = flat[c * CHUNK : (c + 1) * CHUNK]
        signed = torch.mul(signs(part.numel(), dtype, t.device), part).to(torch.float64)
        total += _buckets(signed) * per_chunk[c]
        squares += torch.linalg.vector_norm(signed) ** 2
    return total, squares.sqrt()


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


def grid_parts(rows: int, cols: int, double: int) -> tuple[torch.Tensor, int, int, torch.Tensor]:
    """The CPU `grid` of a value held as (rows, cols), in float64 if `double` else float32, as
    the compiled sketch asks for it: (signs, grid rows, grid columns, fold)."""
    g = grid(rows, cols, torch.float64 if double else torch.float32, torch.device("cpu"))
    return g.signs, g.rows, g.cols, g.fold


CompiledSketch = Callable[
    [torch.Tensor, Callable[[int, int, int], tuple[torch.Tensor, int, int, torch.Tensor]]],
    "tuple[torch.Tensor, torch.Tensor] | None",
]
"""The compiled posthooks' `sketch(t, grid_of)`: sketch 3 of a value in one read (what
`buckets_and_norm(t)` gives, to float64 rounding before the final float32 rounding), or None
where the Python code must sketch it (a value not on the CPU, complex, of more than CHUNK
elements)."""

_compiled: list[CompiledSketch | None] = [None]


def use_compiled(kernel: CompiledSketch | None) -> None:
    """Sketch with `kernel` where it answers (the compiled posthooks' `sketch`, handed in by
    whoever loaded them: this package never imports the hooks), or only in Python (None)."""
    _compiled[0] = kernel


def compiled() -> CompiledSketch | None:
    """The compiled sketch handed in (`use_compiled`), or None: Python sketches every value."""
    return _compiled[0]


def fingerprint(t: torch.Tensor) -> Row:
    """A plain tensor's fingerprint, left on its device: a value of more than EXACT_LIMIT
    elements by the compiled sketch where one is handed in and takes it, else in Python."""
    kernel = _compiled[0]
    if kernel is not None and t.numel() > EXACT_LIMIT:
        made = kernel(t, grid_parts)
        if made is not None:
            return Row(made[1], made[0], False)
    return python_fingerprint(t)


def python_fingerprint(t: torch.Tensor) -> Row:
    """`fingerprint` made in Python alone (where no compiled sketch is handed in or it declines;
    the tests and benchmarks compare the two). A small value's is made from its detached self,
    which records no graph: no `no_grad` block (entering one costs more than the three calls)."""
    if t.numel() <= EXACT_LIMIT:
        real = _real(t.detach())
        flat = real.reshape(-1).to(_sign_dtype(real))
        return Row(torch.linalg.vector_norm(flat), flat, True)
    with torch.no_grad():
        body, norm = buckets_and_norm(t)
    return Row(norm, body, False)


def read_numbers(rows: list[Row]) -> list[float]:
    """Many fingerprints brought to the host in one read, as one list of numbers: the rows'
    norms, then every row's body (its sketch, or its values) in turn, in one `cat` (it promotes
    float32 with float64) and one `tolist`."""
    if not rows:
        return []
    with torch.no_grad():
        return torch.cat([torch.stack([r.norm for r in rows]), *[r.body for r in rows]]).tolist()


def read_rows(rows: list[Row]) -> list[ReadRow]:
    """Many fingerprints brought to the host in one read (`read_numbers`), row by row."""
    numbers = read_numbers(rows)
    out = []
    at = len(rows)
    for norm, r in zip(numbers, rows):
        length = r.body.numel()
        out.append(ReadRow(norm, tuple(numbers[at : at + length])))
        at += length
    return out
