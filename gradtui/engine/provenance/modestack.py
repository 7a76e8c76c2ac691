"""A `TorchFunctionMode` taken off the calling thread's mode stack and put back, under whatever
modes the script pushed above it meanwhile.

torch keeps function modes per thread as a stack, and a script (or torch itself: `FakeTensorMode`,
`torch.compile`'s tracing) may push its own modes above gradtui's provenance mode. Popping
gradtui's mode must keep those, in their order; putting it back must not bury them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from gradtui.engine.compat import get_function_mode_stack, pop_mode, push_mode


def remove(mode: Any) -> bool:
    """Take `mode` off the calling thread's mode stack, keeping any mode pushed above it;
    False if it was not there."""
    if not any(m is mode for m in get_function_mode_stack()):
        return False
    above = []
    while (popped := pop_mode()) is not mode:
        above.append(popped)
    for m in reversed(above):
        push_mode(m)
    return True


@contextlib.contextmanager
def suspended(mode: Any) -> Iterator[None]:
    """`mode` off this thread's stack meanwhile (nothing reaches it, at no cost per op), then
    back where it was: under the modes that were above it, or on top if the script changed the
    stack in between."""
    stack = get_function_mode_stack()
    where = next((i for i, m in enumerate(stack) if m is mode), None)
    if where is None:
        yield
        return
    above = stack[where + 1 :]
    remove(mode)
    try:
        yield
    finally:
        now = get_function_mode_stack()
        count = len(above)
        if count <= len(now) and all(a is b for a, b in zip(now[len(now) - count :], above)):
            for _ in range(count):
                pop_mode()
            push_mode(mode)
            for m in above:
                push_mode(m)
        else:
            push_mode(mode)
