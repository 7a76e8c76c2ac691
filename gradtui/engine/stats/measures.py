"""The statistics measured on a gradient itself, in one description (`MEASURED`) that every Python
read of a gradient follows: `summarize` and its chunked read, the bulk window's read and the
planned hooks' immediate read.

A statistic is measured when it does not follow from the others (those that do are worked out in
the factory, gradtui.protocol.stats.full_stats). The norm is measured by every read, and apart:
the bulk window fuses it with other norms and light statistics take only it. Every other is a
`Measure` here, named as the Stats field (and `full_stats` parameter) it fills, with its kernel
(torch's reduction of a flat float32/float64 tensor to 0-d results) and how the results of a big
tensor's chunks combine. The compiled posthooks and bulk fetch measure the same statistics in C++
(native/records.h's `MEASURED`, the norm first, then these names in this order: the tests hold the
two lists equal), with the same kernels, so the floats agree; but for min and max, which they take
in one pass of their own over a float32 tensor (native/extremes.h: a min or max is a value of the
tensor whatever the way it is found, and where the way shows, a NaN or a zero, torch's kernels
answer as here).

The reads run on every gradient of a pass, so what each needs of the description is written out
once, here, as the plain code it would be if written by hand for these statistics (`_source`:
generated, as `dataclasses` writes `__init__`): a loop over the description per gradient costs
more than the reductions it arranges.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Sequence
from typing import NamedTuple, cast

import torch

from gradtui.protocol.stats import Stats, full_stats

ONE_PASS = 1 << 14
"""Up to this many elements, a contiguous CPU tensor's min and max cost least in one `aminmax`."""


def extremes(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(min, max) of a non-empty tensor, as 0-d tensors (NaN if it holds one: both ways propagate
    it). On the CPU `aminmax` is not vectorized as well as `amin` and `amax`: past `ONE_PASS`
    elements or on a non-contiguous tensor the two cost less (a third of its time on a
    permuted one); elsewhere one kernel launch beats two. Every Python reading of gradtui's takes
    them here (the window's, the planned hooks'), and the compiled reads, which find them in one
    pass of their own, call these same kernels where a zero is the min or max, so they agree: which
    of two zeros of opposite sign is a min or max can depend on the way."""
    if t.is_cpu and (t.numel() > ONE_PASS or not t.is_contiguous()):
        return torch.amin(t), torch.amax(t)
    return torch.aminmax(t)


class Combine(enum.Enum):
    """How the results of a big tensor's chunks make the whole tensor's (in float64)."""

    MIN = "min"
    MAX = "max"
    SUM = "sum"


class Measure(NamedTuple):
    """One kernel and the statistics it measures (see module doc)."""

    names: tuple[str, ...]
    """The Stats fields it fills, in the order of its kernel's results."""
    kernel: Callable[[torch.Tensor], torch.Tensor] | Callable[[torch.Tensor], tuple[torch.Tensor, ...]]
    """A float32/float64 tensor's 0-d result (one name), or results (several, as a tuple)."""
    combine: tuple[Combine, ...]
    """How each of its results combines across chunks."""
    per_element: bool = False
    """Divided by the element count once combined (a mean is a sum per element)."""


MEASURED: tuple[Measure, ...] = (
    Measure(("min", "max"), extremes, (Combine.MIN, Combine.MAX)),
    Measure(("mean",), torch.sum, (Combine.SUM,), per_element=True),
)
"""The measured statistics but the norm (see module doc)."""

NAMES: tuple[str, ...] = tuple(name for m in MEASURED for name in m.names)
"""Every measured statistic's name, in the order the reads hand them over."""

COMBINE: tuple[Combine, ...] = tuple(how for m in MEASURED for how in m.combine)
"""Per name, how its chunks' results combine."""

PER_ELEMENT: tuple[bool, ...] = tuple(m.per_element for m in MEASURED for _ in m.names)
"""Per name, whether it is divided by the element count once combined."""

MIN, MAX = NAMES.index("min"), NAMES.index("max")
"""Where min and max are among the measured: `summarize` finds non-finite values and bins its
histogram by them."""

Measured = tuple[float, ...]
"""The measured statistics of one tensor as floats, in `NAMES` order (a mean already divided)."""


def _factory_call(measured: list[str], nonfinite: str, passed: Sequence[str]) -> str:
    """Source of a call of the factory by position: `measured` (expressions, in `NAMES` order) in
    their parameters' places, `nonfinite` in its, each of `passed` by its own name, every other
    parameter its default (those after the last one given left out)."""
    params = list(inspect.signature(full_stats).parameters.values())
    assert [p.name for p in params[:4]] == ["shape", "dtype", "device", "norm"]
    assert set(NAMES) <= {p.name for p in params}, "each measured statistic is a parameter of full_stats"
    args: list[str | None] = []
    for p in params[4:]:
        if p.name in NAMES:
            args.append(measured[NAMES.index(p.name)])
        elif p.name == "nonfinite":
            args.append(nonfinite)
        elif p.name in passed:
            args.append(p.name)
        else:
            assert p.default is not p.empty, p.name
            args.append(None)
    while args and args[-1] is None:
        args.pop()
    defaults = {p.name: p.default for p in params}
    given = [a if a is not None else repr(defaults[p.name]) for a, p in zip(args, params[4:])]
    return f"full_stats(shape, dtype, device, norm, {', '.join(given)})"


def _source() -> str:
    """The generated functions' source (see `measure`, `finished`, `made`, `made_if_finite`,
    `reduced`): each kernel called once, each statistic a local, the factory called by position."""
    taken: list[str] = []
    results: list[str] = []
    for k, m in enumerate(MEASURED):
        outs = [f"m{len(results) + j}" for j in range(len(m.names))]
        results += outs
        taken.append(f"    {', '.join(outs)} = k{k}(t)" if len(outs) > 1 else f"    {outs[0]} = k{k}(t)")
    values = [f"v{i}" for i in range(len(results))]
    per = [f"v{i} / numel" if PER_ELEMENT[i] else f"v{i}" for i in range(len(results))]
    unpack = f"    {', '.join(values)}, = measured"
    check = " + ".join(f"({v} - {v})" for v in [*values, "norm"])
    rest = ["values", "preview", "histogram", "finite_range"]
    defaults = {p.name: p.default for p in inspect.signature(full_stats).parameters.values()}
    return (
        "\n".join(
            [
                "def measure(t):",
                *taken,
                f"    return ({', '.join(results)},)",
                "def finished(measured, numel):",
                unpack,
                f"    return ({', '.join(per)},)",
                f"def made(shape, dtype, device, norm, measured, nonfinite, {', '.join(f'{r}={defaults[r]!r}' for r in rest)}):",
                unpack,
                f"    return {_factory_call(values, 'nonfinite', rest)}",
                "def made_if_finite(shape, dtype, device, norm, measured):",
                unpack,
                f"    if {check} == 0.0:  # all finite (an infinity or a NaN makes the sum NaN)",
                f"        return {_factory_call(values, '0', [])}",
                "    return None",
                "def reduced(t, shape, dtype, device, numel):",
                *taken,
                f"    {', '.join(values)}, norm = {', '.join(f'{r}.item()' for r in results)}, NORM(t).item()",
                f"    if {check} == 0.0:",
                f"        return {_factory_call(per, '0', [])}",
                "    return None",
            ]
        )
        + "\n"
    )


SOURCE = _source()
"""The generated functions' source, for a reader who wants to see them."""
_namespace: dict[str, object] = {
    "full_stats": full_stats,
    "NORM": torch.linalg.vector_norm,
    **{f"k{k}": m.kernel for k, m in enumerate(MEASURED)},
}
exec(compile(SOURCE, "<gradtui measured statistics>", "exec"), _namespace)

measure = cast("Callable[[torch.Tensor], tuple[torch.Tensor, ...]]", _namespace["measure"])
"""A tensor's measured statistics as 0-d tensors, in `NAMES` order (a mean as its sum): every
kernel run once, nothing read back."""
finished = cast("Callable[[Sequence[float], int], Measured]", _namespace["finished"])
"""Read-back results of `measure` (or combined chunks') as the statistics: a sum per element divided."""
made = cast("Callable[..., Stats]", _namespace["made"])
"""`made(shape, dtype, device, norm, measured, nonfinite, values=None, preview=(), histogram=None,
finite_range=None)`: the factory called with `measured` (a `Measured`) in its statistics' places."""
made_if_finite = cast(
    "Callable[[tuple[int, ...], str, str, float, Measured], Stats | None]", _namespace["made_if_finite"]
)
"""`made` with no non-finite value, if the norm and every measured statistic are finite; else None
(a reader then counts the non-finite values, or redoes a float32 overflow in float64)."""
reduced = cast("Callable[[torch.Tensor, tuple[int, ...], str, str, int], Stats | None]", _namespace["reduced"])
"""A plain dense tensor's full Stats from its reductions, each read back with `.item()` (on the CPU
cheaper than a stack and one read), or None if one is not finite."""


def combined(columns: Sequence[Sequence[torch.Tensor]], numel: int) -> Measured:
    """The statistics of a tensor read in chunks, from each chunk's `measure` (`columns`: per name,
    the chunks' 0-d results), combined in float64 as `COMBINE` says."""
    got = []
    for how, column in zip(COMBINE, columns):
        stacked = torch.stack(list(column))
        match how:
            case Combine.MIN:
                got.append(stacked.min().item())
            case Combine.MAX:
                got.append(stacked.max().item())
            case Combine.SUM:
                got.append(stacked.to(torch.float64).sum().item())
    return finished(got, numel)


ZEROS: Measured = finished([r.item() for r in measure(torch.zeros(1))], 1)
"""The measured statistics of any number of zeros (a ZeroTensor's, read without reading it)."""
