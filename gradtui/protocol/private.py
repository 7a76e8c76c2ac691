"""Private folders and files: the one check of "this user's, and no one else may change it".

gradtui keeps two kinds of per-user files where another local user must not reach them: the
runtime folder (gradtui.wire.runtime: an agent's address and token, so not even readable by
others) and the compiled posthooks' cache (gradtui.engine.hooks.native: native code loaded into
the user's process, so not writable by others). Both are checked here, the same way: a folder
(or a file) is private when it is this user's and its mode opens nothing that `mask` forbids;
a symbolic link to it is followed only if the link itself is this user's or root's.
"""

from __future__ import annotations

import os
import stat

NOT_READABLE = 0o077
"""The runtime folder's mask: nothing for group or others (it holds tokens)."""
NOT_WRITABLE = 0o022
"""The cache's mask: no one else may write (what is in it is run; reading it gives nothing away)."""


def folder_problem(link: os.stat_result, st: os.stat_result, mask: int) -> str | None:
    """Why a folder (`link`: its lstat, `st`: what it names) is not private to this user under
    `mask`, or None."""
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (os.getuid(), 0):
        return f"a symbolic link owned by uid {link.st_uid}"
    if not stat.S_ISDIR(st.st_mode):
        return "not a folder"
    return _owner_or_mode(st, mask)


def file_problem(st: os.stat_result, mask: int) -> str | None:
    """Why a file (its fstat, opened without following a link) is not private to this user
    under `mask`, or None."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    return _owner_or_mode(st, mask)


def _owner_or_mode(st: os.stat_result, mask: int) -> str | None:
    uid = os.getuid()
    if st.st_uid != uid:
        return f"owned by uid {st.st_uid}, not {uid}"
    if st.st_mode & mask:
        return f"mode {stat.S_IMODE(st.st_mode):o}, {'open' if mask == NOT_READABLE else 'writable'} to others"
    return None


def private_folder(path: str, mask: int) -> str | None:
    """Create `path` (0700; the missing folders above it too, as makedirs makes them) and say
    why it is not private under `mask` (None: it is). OSError if it cannot be made or read."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    return folder_problem(os.lstat(path), os.stat(path), mask)
