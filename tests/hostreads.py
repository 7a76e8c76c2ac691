"""A probe that counts host reads: the calls that make the host wait for a tensor's values.

On a GPU each of these is a device synchronisation and a serialisation point of the stream
(`.item()`, `.tolist()`, `float(t)`, `bool(t)`, `int(t)`, `t.nonzero()`, `.cpu()` or
`.numpy()` of a device tensor); on the CPU they cost a Python call each. gradtui's statistics
are kept on the device and read back in bulk, so a pass should make a handful of them, not
one per node: `HostReads` lets the bench and the unit tests count them.

Counting patches `torch.Tensor`'s methods while the probe is active; it is a measuring tool
(the bench, the tests), never installed by a debugging session, so it lives with the tests.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from typing import Any

import torch

_ALWAYS = ("item", "tolist", "__float__", "__bool__", "__int__", "__index__", "nonzero", "numpy")
"""Methods that read values back to the host whatever the tensor's device."""
_DEVICE_ONLY = ("cpu",)
"""Methods that read back only for a tensor that is not on the CPU already."""


class HostReads:
    """Counts host reads made on the threads it watches while active (`with HostReads() as r:`).

    `counts` maps a method name to its number of calls; `total` sums them. Only the calls made
    on `threads` (default: the thread that entered the probe) are counted, so a UI or a test
    runner reading tensors meanwhile does not skew a pass's figure. A read made inside another
    counted read (torch's `__bool__` calling `item`) counts once.
    """

    def __init__(self, threads: set[int] | None = None) -> None:
        self.counts: Counter[str] = Counter()
        self._threads = threads
        self._originals: dict[str, Any] = {}
        self._inside = threading.local()

    @property
    def total(self) -> int:
        """All host reads counted so far."""
        return sum(self.counts.values())

    def reset(self) -> None:
        """Start counting from zero again."""
        self.counts.clear()

    def __enter__(self) -> HostReads:
        if self._threads is None:
            self._threads = {threading.get_ident()}
        for name in _ALWAYS + _DEVICE_ONLY:
            original = getattr(torch.Tensor, name)
            self._originals[name] = original
            setattr(torch.Tensor, name, self._counting(name, original, device_only=name in _DEVICE_ONLY))
        return self

    def __exit__(self, *exc: object) -> None:
        for name, original in self._originals.items():
            setattr(torch.Tensor, name, original)
        self._originals.clear()

    def _counting(self, name: str, original: Any, device_only: bool) -> Any:
        counts, threads, inside = self.counts, self._threads, self._inside

        @functools.wraps(original)
        def counted(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if getattr(inside, "depth", 0) or threading.get_ident() not in threads:  # type: ignore[operator]
                return original(tensor, *args, **kwargs)
            if not (device_only and tensor.device.type == "cpu"):
                counts[name] += 1
            inside.depth = 1
            try:
                return original(tensor, *args, **kwargs)
            finally:
                inside.depth = 0

        return counted
