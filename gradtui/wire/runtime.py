"""Per-user runtime files: where a listening agent says how to reach it.

An agent started with `--listen` (or `gradtui.listen()`) writes `{address, token, pid, script}`
to `agent-PID.json` in a private folder (0700; the file 0600), and removes it when it ends.
`gradtui attach` reads them to find an agent and its token; files of agents that died
without removing theirs (SIGKILL) are skipped and cleaned up.

The folder is `$GRADTUI_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/gradtui`, else `/tmp/gradtui-UID`
(which anyone can create first). One that is not private (open to others, or owned by another
user) is refused with `RuntimeDirError`: one line naming it and what to do, among which setting
`GRADTUI_RUNTIME_DIR` to a private folder of the user's own (on both sides: listen and attach).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass

from gradtui.protocol.private import NOT_READABLE, private_folder


@dataclass(frozen=True)
class AgentEntry:
    """One listening agent, as its runtime file describes it."""

    address: str
    token: str
    pid: int
    script: str


RUNTIME_DIR_ENV = "GRADTUI_RUNTIME_DIR"


class RuntimeDirError(PermissionError):
    """The runtime folder is not private to this user, or cannot be made: one line for the user."""


def runtime_dir() -> str:
    """The private folder of this user's runtime files (created 0700); RuntimeDirError if it is
    not private (see module doc)."""
    base = os.path.expanduser(os.environ.get(RUNTIME_DIR_ENV, ""))
    if not base:
        xdg = os.environ.get("XDG_RUNTIME_DIR")
        base = os.path.join(xdg, "gradtui") if xdg else os.path.join(tempfile.gettempdir(), f"gradtui-{os.getuid()}")
    try:
        problem = private_folder(base, NOT_READABLE)
    except OSError as exc:
        raise RuntimeDirError(f"cannot use the runtime folder {base}: {exc.strerror or exc}; {_what_to_do()}") from None
    if problem is not None:
        fix = "chmod 700 it, or " if problem.startswith("mode") else ""
        raise RuntimeDirError(f"the runtime folder {base} is not private ({problem}): {fix}{_what_to_do()}")
    return base


SUGGESTED_DIR = "~/.local/state/gradtui-runtime"
"""The folder the error suggests: one no other part of gradtui creates (the compiled posthooks'
cache is under ~/.cache), so gradtui makes it 0700 on first use and the advice works."""


def _what_to_do() -> str:
    return (
        f"set {RUNTIME_DIR_ENV} to a private folder of yours that does not exist yet (e.g. "
        f"{RUNTIME_DIR_ENV}={SUGGESTED_DIR}, created 0700 on first use), the same for the agent and for "
        "gradtui attach"
    )


def write_entry(entry: AgentEntry) -> str:
    """Write `entry`'s runtime file (mode 0600); returns its path."""
    path = os.path.join(runtime_dir(), f"agent-{entry.pid}.json")
    if os.path.exists(path):
        os.unlink(path)  # a dead agent's with our pid
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(asdict(entry), out)
    return path


def remove_entry(path: str) -> None:
    """Remove a runtime file (no error if it is gone already)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def alive(pid: int) -> bool:
    """Is process `pid` running (a zombie, dead but not yet reaped by its parent, is not)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def running_agents() -> list[AgentEntry]:
    """The agents whose runtime files name a live process, oldest pid first."""
    found = []
    folder = runtime_dir()
    for name in sorted(os.listdir(folder)):
        if not (name.startswith("agent-") and name.endswith(".json")):
            continue
        path = os.path.join(folder, name)
        try:
            with open(path) as f:
                entry = AgentEntry(**json.load(f))
        except (OSError, ValueError, TypeError):
            continue
        if alive(entry.pid):
            found.append(entry)
        else:
            remove_entry(path)
    return sorted(found, key=lambda e: e.pid)


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `:PORT` or `PORT` (loopback) as (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"{text!r} is not [HOST:]PORT (e.g. :0, 127.0.0.1:5678)") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"port {number} is out of range 0-65535")
    return host, number
