"""Statistics read back in bulk: the gradients of the last few nodes, summarized all at once.

A hook does not summarize the gradient it sees: it appends the tensor to a `StatsWindow` and
gets a handle back (an index into the window; its Stats once read; None for no gradient). When
the window is read (`read`: at a pause, every few nodes while a `nan` / `norm>X` watch is
armed, when it holds too much, at the end of a pass), the
norms of all its tensors are taken in one fused `torch._foreach_norm`, min, max and sum of
those that need them beside, the values of small tensors concatenated, and everything comes
back to the host in **one** `.tolist()`: on a GPU, one device sync for many nodes instead of
several per node; on the CPU, one Python call instead of a dozen per node. Only a gradient
that holds a non-finite value (or overflowed float32) costs a second read. A `nan` watch
`check`s more often than the window is read: one read of the new entries' norms, kept for the
read, says whether anything since is not finite (only then is the window read and the culprit
found).

What the window holds: plain dense float32/float64 tensors of at most `CHUNK` elements.
Anything else (a ZeroTensor, a meta or sparse tensor, half precision, a huge tensor that is
read chunk by chunk) is summarized at once by `summarize`, as before. Holding a gradient has
one effect torch can see: a tensor referenced twice is not stolen by `AccumulateGrad` (it is
copied into `.grad`) nor summed into in place by the engine. So a gradient about to reach a
leaf whose `.grad` is None is not held through the accumulator (`to_leaf`): its values are
read from the leaf's `.grad` afterwards, which then is that very tensor. Values are as torch
computes them either way; only a statistic can differ, if a hook changed the tensor in place
between the node and the read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from gradtui.engine.compat import is_zerotensor, set_grad_enabled
from gradtui.engine.hooks import native
from gradtui.engine.stats.measures import NAMES, ONE_PASS, PER_ELEMENT, Measured, made, made_if_finite, measure
from gradtui.engine.stats.summary import CHUNK, dtype_name, summarize
from gradtui.protocol.stats import VALUES_LIMIT, Stats, light_stats, small_stats, unreadable_stats

_BULK = frozenset({torch.float32, torch.float64})

HELD_ELEMENTS = 1 << 23
"""A window holding more elements than this (32 MB of float32) is read at once."""

_devices: dict[Any, str] = {}


def _device_name(device: Any) -> str:
    name = _devices.get(device)
    if name is None:
        name = _devices[device] = str(device)
    return name


class StatsWindow:
    """Gradients whose statistics have not been read back yet (see module doc).

    Entries are numbered from 0 in each generation; `read` returns the Stats of every entry
    of the generation and starts the next one.
    """

    __slots__ = ("tensors", "full", "leaves", "aliases", "known", "checked", "held", "nonfinite", "_bad")

    def __init__(self) -> None:
        self.tensors: list[torch.Tensor | None] = []
        self.full: list[bool] = []
        """Per entry: min, max and mean wanted too (else the norm and non-finite count)."""
        self.leaves: dict[int, torch.Tensor] = {}
        """Entry -> the leaf whose `.grad` holds its values once its accumulator ran."""
        self.aliases: dict[int, tuple[int, tuple[int, ...]]] = {}
        """Entry -> (entry, shape): the same elements in another shape (a view's gradient)."""
        self.known: dict[int, float | tuple[float, ...]] = {}
        """Entry -> what a `check` read of it: its norm, or a small tensor's values (not read again)."""
        self.checked = 0
        """Entries before this one have been checked."""
        self.held = 0
        """Elements held."""
        self.nonfinite = False
        """Did a gradient of the last read (or one summarized at once before it) hold a NaN or an infinity?"""
        self._bad = False

    def __len__(self) -> int:
        return len(self.tensors)

    def add(self, tensor: Any, light: bool) -> int | Stats | None:
        """A handle for `tensor`'s statistics: held for the next read, or summarized now if the
        window cannot hold it (see module doc)."""
        if tensor is None:
            return None
        if (
            type(tensor) is torch.Tensor
            and tensor.dtype in _BULK
            and tensor.layout is torch.strided
            and 0 < (numel := tensor.numel()) <= CHUNK
            and not tensor.is_meta
            and not is_zerotensor(tensor)
        ):
            self.tensors.append(tensor)
            self.full.append(not light)
            self.held += numel
            return len(self.tensors) - 1
        stats = summarize(tensor, light=light)
        if stats.nonfinite:
            self._bad = True
        return stats

    def alias(self, entry: int, shape: tuple[int, ...]) -> int:
        """A handle for the statistics of `entry`'s elements seen in `shape`."""
        self.tensors.append(None)
        self.full.append(self.full[entry])
        self.aliases[len(self.tensors) - 1] = (entry, shape)
        return len(self.tensors) - 1

    def want_full(self, entry: int) -> None:
        """Entry `entry` must have min, max and mean too (a node stepped at reuses it)."""
        self.full[entry] = True

    def to_leaf(self, entry: int, leaf: torch.Tensor) -> None:
        """Stop holding `entry`'s tensor: it is about to become `leaf.grad`, read from there."""
        tensor = self.tensors[entry]
        if tensor is not None:
            self.tensors[entry] = None
            self.leaves[entry] = leaf
            self.known.pop(entry, None)  # read from the leaf's .grad, as it is then

    def tensor(self, entry: int) -> torch.Tensor | None:
        """The tensor held for `entry` (None once handed to a leaf, or for an alias)."""
        return self.tensors[entry]

    def check(self) -> bool:
        """Did a gradient added since the last check (or read) hold a NaN or an infinity? One
        host read of the new entries' norms (a small tensor's values), kept for the read, so a
        `nan` watch can test every node without reading every node's statistics back."""
        if self._bad:
            return True
        start, self.checked = self.checked, len(self.tensors)
        big, small = _split((i, self.tensors[i]) for i in range(start, self.checked))
        if not big and not small:
            return False
        fetched = _fetch(big, small)
        norms, values = fetched["norm"], fetched["values"]
        known = self.known
        for (i, _, _), norm in zip(big, norms):
            known[i] = norm
        position = 0
        for i, _, numel in small:
            known[i] = tuple(values[position : position + numel])
            position += numel
        return not (all(map(math.isfinite, norms)) and all(map(math.isfinite, values)))

    def read(self) -> list[Stats]:
        """Every entry's Stats, read back in one go (two if a gradient is not finite); clears
        the window for the next generation."""
        return self.read_with([]).stats

    def read_with(self, others: list[torch.Tensor]) -> Read:
        """`read`, and in the same fused norm call and host read the L2 norms of `others` (dense
        floating tensors, as `torch._foreach_norm` takes them): a pass's end reads its leaves'
        gradients and the gradient flow's weights at once."""
        tensors, full, leaves, aliases, known = self.tensors, self.full, self.leaves, self.aliases, self.known
        self.tensors, self.full, self.held, self.checked = [], [], 0, 0
        if leaves:
            self.leaves = {}
        if aliases:
            self.aliases = {}
        if known:
            self.known = {}
        found, self._bad = self._bad, False
        out: list[Any] = [None] * len(tensors)
        for entry, leaf in leaves.items():
            grad = leaf.grad
            if grad is None:
                out[entry] = unreadable_stats(
                    (), "", "", "the leaf's .grad was cleared before its statistics were read"
                )
            elif grad.dtype in _BULK and grad.layout is torch.strided and not is_zerotensor(grad):
                tensors[entry] = grad
            else:
                out[entry] = summarize(grad, light=not full[entry])
        read = Read(out, {}, [])
        if any(t is not None for t in tensors):
            found = self._read_live(tensors, full, known, read, others) or found
        elif others:
            read.others[:] = _fetch([], [], (), others)["norm"]
        for entry, (source, shape) in aliases.items():
            out[entry] = out[source].reshaped(shape)
        self.nonfinite = found
        return read

    @staticmethod
    def _read_live(
        tensors: list[torch.Tensor | None],
        full: list[bool],
        known: dict[int, Any],
        read: Read,
        others: list[torch.Tensor],
    ) -> bool:
        """Fill `read` with the Stats of the held tensors (entries whose tensor is not None; `known`:
        what a check read already) and the norms of `others`; did one hold a non-finite value?"""
        # Small tensors' values come back whole (their norm, min, max and mean are taken from
        # them); bigger ones' norms in one fused call (after those of `others`), the measured
        # statistics (gradtui.engine.stats.measures) beside where wanted; each read back by its
        # statistic's name.
        out = read.stats
        big, small = _split(enumerate(tensors))
        wide = [item for item in big if full[item[0]]]
        unread = [item for item in big if item[0] not in known] if known else big
        fresh = [item for item in small if item[0] not in known] if known else small
        fetched = _fetch(unread, fresh, wide, others) if unread or wide or fresh or others else _NOTHING
        fused = fetched["norm"]
        if others:
            read.others[:] = fused[: len(others)]
            fused = fused[len(others) :]
        norms = read.norms
        norms.update(zip((i for i, _, _ in unread), fused))
        if known:
            norms.update((i, known[i]) for i, _, _ in big if i in known)
        measured: dict[int, Measured] = {
            item[0]: row for item, row in zip(wide, zip(*[fetched[name] for name in NAMES]))
        }
        redo: list[tuple[int, torch.Tensor, float]] = []
        isfinite = math.isfinite
        for i, t, _ in big:
            norm = norms[i]
            if i in measured:
                stats = made_if_finite(tuple(t.shape), dtype_name(t.dtype), _device_name(t.device), norm, measured[i])
                if stats is None:
                    redo.append((i, t, norm))
                    continue
                out[i] = stats
            elif isfinite(norm):
                out[i] = light_stats(tuple(t.shape), dtype_name(t.dtype), _device_name(t.device), norm, 0)
            else:
                redo.append((i, t, norm))
        found = False
        listed, position = fetched["values"], 0
        for i, t, numel in small:
            values = known.get(i) if known else None  # read by a check
            if values is None:
                values = tuple(listed[position : position + numel])
                position += numel
            stats = out[i] = small_stats(tuple(t.shape), dtype_name(t.dtype), _device_name(t.device), values)
            found = found or stats.nonfinite > 0
        if redo:
            _read_nonfinite(redo, full, measured, out)
            found = found or any(out[i].nonfinite for i, _, _ in redo)
        return found


Fetched = dict[str, list[float]]
"""What `_fetch` read, by statistic: "norm", the norms of `others` then of `big`; each measured
statistic (gradtui.engine.stats.measures's `NAMES`: Stats' field names), one per `wide` tensor;
"values", every value of `small` in order. Read by name (never by position), as the compiled fetch
fills it (native/fetch.h)."""

_NOTHING: Fetched = {"norm": [], **{name: [] for name in NAMES}, "values": []}


def _fetch(
    big: list[tuple[int, torch.Tensor, int]],
    small: list[tuple[int, torch.Tensor, int]],
    wide: Sequence[tuple[int, torch.Tensor, int]] = (),
    others: Sequence[torch.Tensor] = (),
) -> Fetched:
    """One host read: the norms of `others` and of `big` (one fused call), the measured statistics
    of each of `wide`, every value of `small` (see `Fetched`). On the CPU the compiled library reads
    them (the same kernels, the same floats: gradtui/engine/hooks/native/fetch.h), where built."""
    if (compiled := native.load().module) is not None:
        numbers = compiled.fetch(
            [*others, *(t for _, t, _ in big)], [t for _, t, _ in wide], [t for _, t, _ in small], ONE_PASS
        )
        if numbers is not None:
            return numbers
    return fetch_in_python(big, small, wide, others)


def fetch_in_python(
    big: list[tuple[int, torch.Tensor, int]],
    small: list[tuple[int, torch.Tensor, int]],
    wide: Sequence[tuple[int, torch.Tensor, int]] = (),
    others: Sequence[torch.Tensor] = (),
) -> Fetched:
    """`_fetch` with torch's Python calls (any device: one sync for all of it)."""
    with _no_grad():
        normed = [*others, *(t for _, t, _ in big)] if others else [t for _, t, _ in big]
        parts = [torch.stack(torch._foreach_norm(normed))] if normed else []
        if wide:
            extras: list[torch.Tensor] = []
            for _, t, _ in wide:
                extras += measure(t)
            parts.append(torch.stack(extras))
        parts += [t for _, t, _ in small]
        numbers = _flatten(parts).tolist() if parts else []
    count, width = len(normed), len(NAMES)
    end = count + width * len(wide)
    fetched = {"norm": numbers[:count]}
    for k, name in enumerate(NAMES):  # each measured statistic's column (a sum per element divided)
        column = numbers[count + k : end : width]
        fetched[name] = [v / numel for v, (_, _, numel) in zip(column, wide)] if PER_ELEMENT[k] else column
    fetched["values"] = numbers[end:]
    return fetched


def read_by_norm(numel: int) -> bool:
    """Is a held tensor of `numel` elements read by its norm (else its values are listed)?"""
    return numel > VALUES_LIMIT


def _split(entries: Any) -> tuple[list[tuple[int, torch.Tensor, int]], list[tuple[int, torch.Tensor, int]]]:
    """(entry, tensor, numel) of the held tensors among `entries` ((entry, tensor or None)
    pairs): those read by their norm, and those small enough to read their values."""
    big: list[tuple[int, torch.Tensor, int]] = []
    small: list[tuple[int, torch.Tensor, int]] = []
    for i, t in entries:
        if t is not None:
            numel = t.numel()
            (big if read_by_norm(numel) else small).append((i, t, numel))
    return big, small


class _no_grad:
    """No autograd recording for gradtui's reductions (create_graph's gradients require grad);
    cheaper than torch.no_grad() when grad mode is already off, as it is inside the engine."""

    __slots__ = ("_was",)

    def __enter__(self) -> None:
        self._was = torch.is_grad_enabled()
        if self._was:
            set_grad_enabled(False)

    def __exit__(self, *exc: object) -> None:
        if self._was:
            set_grad_enabled(True)


def _read_nonfinite(
    redo: list[tuple[int, torch.Tensor, float]],
    full: list[bool],
    measured: dict[int, Measured],
    out: list[Any],
) -> None:
    """Stats of tensors whose norm (or a measured statistic) came back non-finite: their non-finite
    values are counted in one more read; where there are none, float32 overflowed on finite
    values and the tensor is summarized the long way (in float64)."""
    with torch.no_grad():
        counts = torch.stack([torch.isfinite(t).logical_not_().sum() for _, t, _ in redo]).tolist()
    for (i, t, norm), nonfinite in zip(redo, counts):
        if not nonfinite:
            out[i] = summarize(t, light=not full[i])
            continue
        shape, dtype, device = tuple(t.shape), dtype_name(t.dtype), _device_name(t.device)
        if i in measured:
            out[i] = made(shape, dtype, device, norm, measured[i], nonfinite)
        else:
            out[i] = light_stats(shape, dtype, device, norm, nonfinite)


class Read(NamedTuple):
    """What `StatsWindow.read_with` read: every entry's Stats, the fused norm read of each big
    entry (as it came back: a float32 overflow's is infinite, though its Stats' norm is redone),
    and the norms of the other tensors."""

    stats: list[Stats]
    norms: dict[int, float]
    others: list[float]


def _flatten(parts: list[torch.Tensor]) -> torch.Tensor:
    """One flat tensor of every element of `parts` (any shapes; float32 and float64 mixed)."""
    if len(parts) == 1 and parts[0].dim() == 1:
        return parts[0]
    return torch._C._nn.flatten_dense_tensors(parts)


def resolve(handles: Sequence[Any], stats: list[Stats]) -> tuple[Stats | None, ...]:
    """Handles of the generation just read, as Stats (Stats and None stay as they are)."""
    return tuple([stats[h] if type(h) is int else h for h in handles])  # a list first: faster than a generator
