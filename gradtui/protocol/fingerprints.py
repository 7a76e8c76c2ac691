"""What a pass's fingerprints and their comparison with a reference share: plain data.

The engine makes a pass's fingerprints (gradtui.engine.fingerprints.values); record compares them with
a reference recording's (gradtui.record.compare, gradtui.record.against). The engine may not
import record, so what both speak lives here: which value of a node a fingerprint is of, a
value's fingerprint, where a run parts from its reference, and what a pass's fingerprints ask
of the reference pass they are compared with (`PassAgainst`; record's PassReference is one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Protocol

RECEIVED, SENT, OUTPUT, SAVED = 0, 1, 2, 3
"""Which value of a node: what flowed into it, what it sent on, its forward output, a saved leaf value."""


class Value(NamedTuple):
    """One value's fingerprint: its norm and its sketch (or its values, when `exact`). A
    NamedTuple: a live run `--against` makes hundreds per pass, in the backward."""

    norm: float | None
    data: tuple[float, ...]
    exact: bool
    what: str = ""


def estimate_distance(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """‖x − y‖ from the fingerprints' data `a` and `b` of x and y: exact where they are the values
    themselves, else the sign sketch's estimate (it is linear and E ‖S(d)‖² = ‖d‖²:
    gradtui.engine.fingerprints.sketch)."""
    return math.dist(a, b)


Values = dict[tuple[int, tuple[int, int]], Value]
"""(node, (dir, slot)) -> its Value: a pass's fingerprints as they are compared."""


@dataclass(frozen=True)
class Parting:
    """Where this run parts from the reference at a node: which value, by how much."""

    node: int
    """The node named (for an output: the node that made it)."""
    kind: str
    """"forward" or "backward"."""
    what: str
    """Which value: `its forward output`, `its saved value mat2`, `its arguments`, `the gradient it sent (input 0)`."""
    relative: float
    """‖a − b‖ / max(‖a‖, ‖b‖) (estimated from the sketches unless exact; inf: on one side only)."""
    norms: tuple[float | None, float | None]
    """(here, in the reference)."""
    arguments: str | None = None

    def text(self, reference: str) -> str:
        """One line for a pause reason."""
        if self.arguments is not None:
            return f"{self.kind} differs from {reference}: {self.what}: {self.arguments} (here vs there)"
        size = "on one side only" if math.isinf(self.relative) else f"by {self.relative:.3g} (relative)"
        here, there = (norm_text(n) for n in self.norms)
        return f"{self.kind} differs from {reference}: {self.what} {size}; norm {here} here, {there} there"


def norm_text(n: float | None) -> str:
    """A norm in a report line (`-`: not known)."""
    return "-" if n is None else f"{n:.6g}"


class PassAgainst(Protocol):
    """What a pass's fingerprints ask of the reference pass they are compared with, live
    (`--against`): gradtui.record.against.PassReference is one."""

    only_here: int
    """How many of this run's nodes match none of the reference's."""

    def note(self, values: Values) -> None:
        """Keep this run's `values` for later checks, `print` and `differences`."""

    def check(
        self, node: int, producers: tuple[int | None, ...], values: Values, rtol: float, leafish: tuple[bool, ...] = ()
    ) -> Parting | None:
        """Note `values` and say whether the runs part at `node` by more than `rtol`."""

    def both_sides(self, node: int) -> list[str]:
        """`print`'s lines of `node`'s values here and in the reference."""

    def differences(self) -> list[tuple[int, float | None, float | None]]:
        """(node, forward, gradient): each matched node's largest relative differences."""
