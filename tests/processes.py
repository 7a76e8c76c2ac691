"""Processes a test started, seen from outside: has one ended, what runs below it. Shared by
the tests that start a UI, an agent, a browser tab or a torchrun job and must leave none."""

from __future__ import annotations

import os
import subprocess


def gone(pid: int) -> bool:
    """Has process `pid` ended? A zombie counts as ended: it runs nothing (an orphan's may wait
    for an init that does not reap in a container)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):  # it ended while /proc was read
        return True


def children(pid: int, pattern: str | None = None) -> list[int]:
    """The pids of `pid`'s live children (whose command line matches `pattern`)."""
    args = ["pgrep", "-P", str(pid)] + (["-f", pattern] if pattern else [])
    out = subprocess.run(args, capture_output=True, text=True, timeout=10).stdout
    return [int(p) for p in out.split()]


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, children first (one pass over /proc: a torchrun job's ranks,
    each in a session of its own, found before torchrun is killed and they are orphaned)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
