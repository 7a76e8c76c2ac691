"""torch.distributed as gradtui sees it: is this a job, which rank, the job's store, timeouts.

Every private torch symbol the distributed layer uses is here, each with a fallback:
`distributed_c10d._get_default_store` (the store `init_process_group` made: torchrun's
TCPStore), `_set_pg_timeout` and the group map (as `torch.distributed.breakpoint` uses them).
Verified here (torch 2.13, gloo): `_set_pg_timeout` changes the timeout of work launched
after it only; a collective already in flight keeps the timeout it was launched with and
fails at it. So the timeouts are raised for as long as the job can pause, not only during a
pause (see `RankLink.can_pause`), and follow mode keeps the ranks at the same node where their
graphs agree.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

PAUSE_TIMEOUT = timedelta(days=7)
"""The process groups' timeout while a rank is paused or parked."""


def in_job_env() -> bool:
    """Does the environment say this process is one rank of several (torchrun sets WORLD_SIZE)?"""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def initialized() -> bool:
    """Has the script initialised torch.distributed with more than one rank?"""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch without distributed
        return False
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the world size (of the default group)."""
    import torch.distributed as dist

    return dist.get_rank(), dist.get_world_size()


def job_store() -> Any:
    """A store of gradtui's own (keys under `gradtui/`) on the job's store, on a connection of its
    own where the store can clone one, so gradtui's waits never hold the process group's."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    getter = getattr(c10d, "_get_default_store", None)
    if getter is not None:
        base = getter()
    else:  # pragma: no cover - older layouts
        base = c10d._world.pg_map[c10d._get_default_group()][1]
    try:
        base = base.clone()
    except (AttributeError, RuntimeError):
        pass
    return dist.PrefixStore("gradtui/", base)


def groups() -> list[Any]:
    """Every process group of this process (the default one first)."""
    from torch.distributed import distributed_c10d as c10d

    found = list(getattr(c10d, "_pg_map", None) or c10d._world.pg_map)
    try:
        default = c10d._get_default_group()
    except (ValueError, RuntimeError):  # not initialised (or destroyed by the script's end)
        return found
    return [default] + [g for g in found if g is not default]


def group_timeout(group: Any) -> timedelta | None:
    """The timeout `group`'s collectives run with now (None if torch does not say)."""
    from torch.distributed import distributed_c10d as c10d

    try:
        return c10d._get_pg_config(group)["timeout"]
    except (AttributeError, KeyError, RuntimeError, TypeError):
        pass
    try:
        return group._get_backend(__import__("torch").device("cpu")).options._timeout
    except (AttributeError, RuntimeError):
        return None


def set_timeouts(timeouts: dict[Any, timedelta]) -> None:
    """Set each group's timeout, as `torch.distributed.breakpoint` does (work launched from now on)."""
    import warnings

    from torch.distributed import distributed_c10d as c10d

    for group, timeout in timeouts.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                c10d._set_pg_timeout(timeout, group)
        except (AttributeError, ValueError, RuntimeError):
            pass


class Timeouts:
    """Raises every group's timeout while the job can pause and puts the old ones back after."""

    def __init__(self) -> None:
        self._saved: dict[Any, timedelta] | None = None

    @property
    def raised(self) -> bool:
        """Are the timeouts raised now?"""
        return self._saved is not None

    def script_timeout(self) -> timedelta | None:
        """The default group's timeout as the script set it (the saved one while raised)."""
        saved = self._saved
        if saved is not None:
            return next(iter(saved.values()), None)
        found = groups()
        return group_timeout(found[0]) if found else None

    def raise_(self) -> None:
        """Raise them (no-op if raised)."""
        if self._saved is not None:
            return
        saved = {}
        for group in groups():
            old = group_timeout(group)
            if old is not None:
                saved[group] = old
        self._saved = saved
        set_timeouts({group: PAUSE_TIMEOUT for group in saved})

    def restore(self) -> None:
        """Put the timeouts they had back (no-op if not raised)."""
        saved, self._saved = self._saved, None
        if saved:
            set_timeouts(saved)
