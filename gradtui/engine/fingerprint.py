"""Fingerprints of a recorded pass's values, for comparing two runs (`gradtui diff`).

A value's sketch is its inner products with `K` fixed pseudo-random Gaussian directions,
seeded by the value's shape (so the same in every run, every process), beside its norm. The
sketch is linear, so sketch(a) - sketch(b) = sketch(a - b), and for Gaussian directions
‖sketch(d)‖ / sqrt(K) estimates ‖d‖: two recordings alone tell how far apart two values are
(`estimate_distance`). A value of at most `EXACT_LIMIT` elements is kept whole instead (the
comparison is then exact).

Per node of a recorded pass (`PassPrints.node`, called from the node's posthook):

- the gradients it received (`RECEIVED`) and sent on (`SENT`);
- its forward output (`OUTPUT`): autograd keeps no node's output as such, but the node that
  consumed it usually saved it for its own backward (`_saved_self`, `_saved_mat1`...), and a
  saved tensor's `grad_fn` names the node that produced it; a node that saved its own result
  (`_saved_result`: exp, tanh, sigmoid...) gives it directly. An output no consumer saved (an
  add feeding an add) has no fingerprint: the first consumer that saved something derived from
  it is where a difference shows;
- the saved tensors that no node of the pass produced (`SAVED`: parameters and inputs used
  directly), and its saved non-tensor arguments as text (`approximate='tanh'`, `dim=1`).

Tensors are held for a few nodes, then summarized together (`_flush`): tensors of one shape are
stacked and multiplied by their directions in one matmul, norms taken in one fused call; the
results stay on the device and the whole pass comes back to the host in one read at its end
(`event`), so fingerprints add no host read per node. A tensor of more than `CHUNK` elements
is projected chunk by chunk with one chunk's directions and per-chunk random signs (still an
unbiased estimate; no direction matrix bigger than a chunk's).
"""

from __future__ import annotations

import zlib
from typing import Any, NamedTuple

import torch

from gradtui.model import events as ev

K = 8
"""Directions per sketch."""

EXACT_LIMIT = 64
"""A value of at most this many elements is recorded whole (compared exactly)."""

CHUNK = 1 << 20
"""A tensor of more elements is projected chunk by chunk (directions of one chunk, random signs)."""

HELD_ELEMENTS = 1 << 24
"""Held tensors past this many elements are summarized at once (every `HELD_NODES` nodes otherwise)."""
HELD_NODES = 64

RECEIVED, SENT, OUTPUT, SAVED = 0, 1, 2, 3
"""`Print.dir`: what flowed into the node, what it sent on, its forward output, a saved leaf value."""

_SEED = 0x6772_6164
_SKIPPED_SUFFIXES = ("_sym_sizes", "_sym_strides", "_sym_numel", "_sizes", "_strides", "_numel")
"""Saved attributes that describe shapes (already in the statistics): not fingerprinted."""

_directions: dict[tuple[tuple[int, ...], torch.dtype, torch.device], torch.Tensor] = {}
_signs: dict[tuple[int, ...], torch.Tensor] = {}
_saved_names: dict[type, tuple[str, ...]] = {}
_cached_elements = 0
CACHE_ELEMENTS = 1 << 26
"""Direction matrices kept past this many elements are dropped (rebuilt when next wanted)."""


def _seed(shape: tuple[int, ...], salt: int = 0) -> int:
    return zlib.crc32(repr((shape, salt)).encode()) ^ _SEED


def directions(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The (rows, K) Gaussian directions of a value of `shape` (rows: its elements, at most
    CHUNK), the same in every run: generated on the CPU in float64 from a seed of the shape,
    then cached per shape, dtype and device."""
    global _cached_elements
    key = (shape, dtype, device)
    found = _directions.get(key)
    if found is None:
        numel = 1
        for size in shape:
            numel *= size
        rows = min(numel, CHUNK)
        generator = torch.Generator().manual_seed(_seed(shape))
        found = torch.randn(rows, K, generator=generator, dtype=torch.float64).to(dtype=dtype, device=device)
        if _cached_elements + found.numel() > CACHE_ELEMENTS:
            _directions.clear()
            _cached_elements = 0
        _directions[key] = found
        _cached_elements += found.numel()
    return found


def _chunk_signs(shape: tuple[int, ...], chunks: int) -> torch.Tensor:
    """(chunks, K) random ±1 of a huge value's chunks, seeded by its shape."""
    found = _signs.get(shape)
    if found is None:
        generator = torch.Generator().manual_seed(_seed(shape, 1))
        found = _signs[shape] = torch.randint(0, 2, (chunks, K), generator=generator).double() * 2 - 1
    return found


def _float(t: torch.Tensor) -> torch.Tensor:
    """`t` as a real float32/float64 tensor (integer indices and masks count as numbers)."""
    if t.is_complex():
        t = torch.view_as_real(t)
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


def sketch_one(t: torch.Tensor) -> torch.Tensor:
    """The K-element sketch of one tensor, on its device (float64 for a chunked one)."""
    shape = tuple(t.shape)
    flat = _float(t.detach()).reshape(-1)
    g = directions(shape, flat.dtype, flat.device)
    numel = flat.numel()
    if numel <= CHUNK:
        return flat @ g
    whole, tail = divmod(numel, CHUNK)
    signs = _chunk_signs(shape, whole + (1 if tail else 0)).to(flat.device)
    parts = (flat[:whole * CHUNK].view(whole, CHUNK) @ g).double()
    if tail:
        parts = torch.cat((parts, (flat[whole * CHUNK:] @ g[:tail]).double().reshape(1, K)))
    return (parts * signs).sum(0)


def estimate_distance(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """‖x - y‖ estimated from the sketches `a` and `b` of x and y (see module doc)."""
    return (sum((p - q) ** 2 for p, q in zip(a, b)) / K) ** 0.5


def saved_names(fn: Any) -> tuple[str, ...]:
    """The `_saved_*` attributes of a node's type (its saved values), cached per type."""
    kind = type(fn)
    names = _saved_names.get(kind)
    if names is None:
        names = _saved_names[kind] = tuple(n for n in dir(fn) if n.startswith("_saved_")
                                           and not n.endswith(_SKIPPED_SUFFIXES))
    return names


class _Entry(NamedTuple):
    """Where a fingerprint goes: node, direction, slot, what it is, whether it holds the values."""

    node: int
    dir: int
    slot: int
    what: str
    exact: bool


class _Held(NamedTuple):
    """A tensor waiting to be summarized, and its entry."""

    tensor: torch.Tensor
    entry: _Entry


def _plain(t: Any) -> bool:
    """Can `t`'s values be read (a strided tensor with storage, not a ZeroTensor or meta)?"""
    return (isinstance(t, torch.Tensor) and t.layout is torch.strided and not t.is_meta
            and not t._is_zerotensor() and t.numel() > 0)


class PassPrints:
    """The fingerprints of one recorded pass, gathered node by node (see module doc)."""

    def __init__(self, nodes: list[Any]) -> None:
        self._ids = {id(fn): i for i, fn in enumerate(nodes)}
        """id of a node object -> its node id in the pass (the capture keeps the objects alive)."""
        self._held: list[_Held] = []
        self._elements = 0
        self._nodes = 0
        self._outputs: set[int] = set()
        """Nodes whose output is fingerprinted already (several consumers may have saved it)."""
        self._done: list[tuple[list[_Entry], list[torch.Tensor]]] = []
        """Summarized batches: their entries and, per entry, a device tensor [norm, sketch or values]."""
        self._zeros: list[ev.Print] = []
        self._params: list[ev.Print] = []

    failed: str | None = None
    """Why fingerprinting stopped in this pass (it never breaks the user's backward), or None."""

    def node(self, node: int, fn: Any, received: tuple[Any, ...], sent: tuple[Any, ...]) -> None:
        """Note what `node` (`fn`, the autograd node) received, sent and saved; called after it
        ran. A failure stops this pass's fingerprints, never the pass."""
        if self.failed is not None:
            return
        try:
            self._node(node, fn, received, sent)
        except Exception as exc:  # noqa: BLE001 - a user's odd tensor must not abort their backward
            self.failed = f"{type(exc).__name__}: {exc}"
            self._held, self._done = [], []

    def _node(self, node: int, fn: Any, received: tuple[Any, ...], sent: tuple[Any, ...]) -> None:
        for slot, grad in enumerate(received):
            self._hold(grad, node, RECEIVED, slot, "")
        targets = fn.next_functions if sent else ()
        for slot, grad in enumerate(sent):
            if slot < len(targets) and hasattr(targets[slot][0], "variable") and _plain(grad):
                # Bound for a leaf's accumulator: held, it would be copied into .grad instead
                # of taken. Its sketch is taken now instead.
                self._now(grad, node, SENT, slot)
            else:
                self._hold(grad, node, SENT, slot, "")
        params = []
        for number, name in enumerate(saved_names(fn)):
            try:
                value = getattr(fn, name)
            except RuntimeError:  # released (retain_graph=False after a pause's own use) or unreadable
                continue
            if isinstance(value, torch.Tensor):
                producer = self._ids.get(id(value.grad_fn)) if value.grad_fn is not None else None
                if producer is None:
                    self._hold(value, node, SAVED, number, name[7:])
                elif producer not in self._outputs:
                    self._outputs.add(producer)
                    self._hold(value, producer, OUTPUT, 0, f"saved by #{node} as {name[7:]}")
            elif not isinstance(value, (tuple, list)) or not any(isinstance(v, torch.Tensor) for v in value):
                params.append(f"{name[7:]}={value!r}")
        if params:
            self._params.append(ev.Print(node, SAVED, -1, None, (), False, ", ".join(params)))
        self._nodes += 1
        if self._nodes % HELD_NODES == 0 or self._elements > HELD_ELEMENTS:
            self._flush()

    def _hold(self, t: Any, node: int, direction: int, slot: int, what: str) -> None:
        if not isinstance(t, torch.Tensor):
            return
        if not _plain(t):
            if isinstance(t, torch.Tensor) and t._is_zerotensor():
                self._zeros.append(ev.Print(node, direction, slot, 0.0, (0.0,) * K, False, what))
            return
        self._held.append(_Held(t, _Entry(node, direction, slot, what, t.numel() <= EXACT_LIMIT)))
        self._elements += t.numel()

    def _now(self, t: torch.Tensor, node: int, direction: int, slot: int) -> None:
        """Summarize one tensor at once (kept on the device until the pass's read)."""
        entry = _Entry(node, direction, slot, "", t.numel() <= EXACT_LIMIT)
        with torch.no_grad():
            flat = _float(t.detach()).reshape(-1)
            body = flat if flat.numel() <= EXACT_LIMIT else sketch_one(t)
            row = torch.cat((torch.linalg.vector_norm(flat).reshape(1).double(), body.double()))
        self._done.append(([entry], [row]))

    def _flush(self) -> None:
        """Summarize the held tensors: per shape and dtype one stacked matmul, one fused norm."""
        held, self._held, self._elements = self._held, [], 0
        if not held:
            return
        groups: dict[tuple, list[_Held]] = {}
        for h in held:
            groups.setdefault((tuple(h.tensor.shape), h.tensor.dtype, h.tensor.device), []).append(h)
        with torch.no_grad():
            for (shape, _, _), items in groups.items():
                tensors = [_float(h.tensor.detach()) for h in items]
                norms = torch.stack(torch._foreach_norm(tensors)).reshape(-1, 1)
                numel = tensors[0].numel()
                if numel <= EXACT_LIMIT:
                    body = torch.stack([t.reshape(-1) for t in tensors])
                elif numel <= CHUNK:
                    body = torch.stack(tensors).reshape(len(tensors), numel) @ directions(
                        shape, tensors[0].dtype, tensors[0].device)
                else:
                    body = torch.stack([sketch_one(t) for t in tensors])
                rows = torch.cat((norms.to(body.dtype), body), dim=1)
                self._done.append(([h.entry for h in items], list(rows.double().unbind(0))))

    def event(self, index: int) -> ev.PassPrints:
        """The pass's fingerprints as plain data: one host read for the whole pass (none if
        fingerprinting failed in it)."""
        if self.failed is None:
            try:
                self._flush()
            except Exception as exc:  # noqa: BLE001 - as in `node`
                self.failed = f"{type(exc).__name__}: {exc}"
        if self.failed is not None:
            return ev.PassPrints(index, ())
        entries = [e for items, _ in self._done for e in items]
        rows = [r for _, rs in self._done for r in rs]
        self._done = []
        out = list(self._zeros) + list(self._params)
        if rows:
            lengths = [r.numel() for r in rows]
            numbers = torch.cat(rows).tolist()
            position = 0
            for e, length in zip(entries, lengths):
                values = tuple(numbers[position + 1:position + length])
                out.append(ev.Print(e.node, e.dir, e.slot, numbers[position], values, e.exact, e.what))
                position += length
        return ev.PassPrints(index, tuple(out))
