"""The compiled posthooks' cache folder: where it is, that it is this user's, and what is in it.

Loading a library runs its code in the user's process, so the folder and every file read from it
are checked as the runtime folder is (gradtui.protocol.private): this user's, writable by no one
else, the folder created 0700. The folder is `$GRADTUI_CACHE/native`, else
`$XDG_CACHE_HOME/gradtui/native`, else `~/.cache/gradtui/native`.

- A library is loaded only if its bytes are those recorded when it was built: its sha256, in
  `NAME.sha256` beside it, written before the library is renamed into place (each through a
  temporary file, fsynced, then renamed, the folder fsynced), both under the folder's install
  lock, which a reader holds shared while it opens the pair. The bytes hashed are those of the
  descriptor that is then loaded (`/proc/self/fd/N` on Linux), so nothing can be swapped between.
- A build that failed leaves `NAME.failed`: why (the compiler's or the system's own words), how
  many times, with which compiler. It is retried once its back-off has passed (an hour, doubling
  at each failure, at most a day; the record's mtime is when it failed), or at once when the
  compiler is another (installed, upgraded, `CXX` changed); torch and the source are in NAME.
- A background builder holds `NAME.lock` (flock) for its whole life: the run that starts it takes
  the lock first and hands it over, so runs at once start one builder between them, and a
  builder that died holds nothing.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

from gradtui.protocol.private import NOT_WRITABLE, file_problem, private_folder

CACHE_ENV = "GRADTUI_CACHE"
BACKOFF = 3600.0
"""Seconds before a failed build is tried again; doubled at each failure in a row."""
BACKOFF_CAP = 86400.0
"""The longest wait between two tries."""
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


class CacheRefused(PermissionError):
    """The cache folder, or a file in it, is not this user's alone: one line for the user."""


def root() -> Path:
    """gradtui's cache folder (see module doc); the compiled posthooks live in its `native/`."""
    given = os.environ.get(CACHE_ENV, "")
    if given:
        return Path(os.path.expanduser(given))
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = (
        Path(xdg) if os.path.isabs(xdg) else Path(os.path.expanduser("~")) / ".cache"
    )  # XDG: a relative one is ignored
    return base / "gradtui"


def folder() -> Path:
    """Where built libraries live."""
    return root() / "native"


class Verified(NamedTuple):
    """A library whose bytes are the recorded ones, open: load it by `path` (the descriptor's
    own, where the system has one), then `close()`."""

    fd: int
    path: str

    def close(self) -> None:
        """Release the descriptor (a loaded library stays mapped)."""
        os.close(self.fd)


class Damaged(NamedTuple):
    """A library whose bytes are not the recorded ones (truncated, overwritten, no record)."""

    why: str


@dataclass(frozen=True)
class Failure:
    """A failed build's record (see module doc)."""

    reason: str
    tries: int
    compiler: str
    at: float = 0.0
    """When it failed (the record's mtime; not stored in it)."""

    def due(self, compiler: str, now: float) -> bool:
        """May it be tried again now, with `compiler`?"""
        return compiler != self.compiler or now >= self.at + min(BACKOFF * 2 ** max(self.tries - 1, 0), BACKOFF_CAP)

    def retry_at(self) -> float:
        """When it will be tried again with the same compiler."""
        return self.at + min(BACKOFF * 2 ** max(self.tries - 1, 0), BACKOFF_CAP)


class Cache:
    """The cache folder, checked and open (a context manager: the folder's descriptor is closed
    at its end). Every file is reached through the folder's descriptor, never by following a
    link."""

    def __init__(self, path: Path, fd: int) -> None:
        """Use `open()`."""
        self.path = path
        self._fd = fd

    @classmethod
    def open(cls) -> Cache:
        """The cache folder (created 0700); CacheRefused (one line) if it is not this user's
        alone, OSError if it cannot be made or read."""
        path = folder()
        with contextlib.suppress(FileExistsError):  # gradtui's own folder made 0700 too, not as makedirs would
            os.makedirs(path.parent.parent, exist_ok=True)
            os.mkdir(path.parent, 0o700)
        problem = private_folder(str(path), NOT_WRITABLE)
        if problem is None:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            st = os.fstat(fd)
            if st.st_uid != os.getuid() or st.st_mode & NOT_WRITABLE:  # changed since it was checked
                os.close(fd)
                problem = "it changed while it was checked"
            else:
                return cls(path, fd)
        fix = "chmod go-w it, or " if problem.startswith("mode") else ""
        raise CacheRefused(
            f"refusing the compiled posthooks' cache {path}: it is not yours alone ({problem}); "
            f"{fix}set {CACHE_ENV} to a folder of your own; this run uses the Python hooks"
        )

    def __enter__(self) -> Cache:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the folder's descriptor."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # -- the library and its digest -------------------------------------------------------------

    def library(self, name: str) -> Verified | Damaged | None:
        """The library `name` if its bytes are the recorded ones; Damaged if they are not; None
        if there is none. CacheRefused if it, or its record, is not this user's alone."""
        with self._install_lock(fcntl.LOCK_SH):
            try:
                fd = os.open(name, _READ, dir_fd=self._fd)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # never followed: not what a build installs
                    return Damaged(f"the compiled posthooks at {self.path / name} are a symbolic link")
                raise
            try:
                recorded = self._read_checked(_digest_name(name))
            except FileNotFoundError:
                recorded = None
            except OSError as exc:
                os.close(fd)
                if exc.errno == errno.ELOOP:
                    return Damaged(f"the digest of {self.path / name} is a symbolic link")
                raise
            except BaseException:
                os.close(fd)
                raise
        try:
            self._check(fd, name)
            digest = _sha256(fd)
        except BaseException:
            os.close(fd)
            raise
        if recorded is None or recorded.decode(errors="replace").strip() != digest:
            os.close(fd)
            why = "no digest was recorded for it" if recorded is None else "its bytes are not those it was built with"
            return Damaged(f"the compiled posthooks at {self.path / name} are damaged ({why})")
        return Verified(fd, f"/proc/self/fd/{fd}" if sys.platform == "linux" else str(self.path / name))

    def discard(self, name: str) -> None:
        """Remove a damaged library and its digest (so that no later run reads them again)."""
        with self._install_lock(fcntl.LOCK_EX):
            for each in (name, _digest_name(name)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(each, dir_fd=self._fd)

    def temporary(self, name: str) -> Path:
        """A file a build of `name` may write (its own: another build at once has another)."""
        return self.path / f".{name}.{os.getpid()}.{time.monotonic_ns()}.tmp"

    def install(self, temporary: Path, name: str) -> None:
        """Move the built `temporary` into place as `name`, its digest recorded first (see module
        doc). OSError (a full disk, say) if it cannot be: nothing half-written is left in place."""
        digest_tmp = f"{temporary.name}.sha256"
        try:
            fd = os.open(temporary.name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._fd)
            try:
                digest = _sha256(fd)
                os.fsync(fd)
            finally:
                os.close(fd)
            self._write(digest_tmp, f"{digest}\n".encode())
            with self._install_lock(fcntl.LOCK_EX):
                os.replace(digest_tmp, _digest_name(name), src_dir_fd=self._fd, dst_dir_fd=self._fd)
                os.replace(temporary.name, name, src_dir_fd=self._fd, dst_dir_fd=self._fd)
            os.fsync(self._fd)
        finally:
            for each in (temporary.name, digest_tmp):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(each, dir_fd=self._fd)

    # -- failed builds ------------------------------------------------------------------------------

    def failure(self, name: str) -> Failure | None:
        """The record of `name`'s failed build, if any. CacheRefused if it is not this user's
        alone (it is then not believed: it cannot turn the compiled hooks off)."""
        try:
            fd = os.open(_failure_name(name), _READ, dir_fd=self._fd)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as f:
            self._check(f.fileno(), _failure_name(name))
            at = os.fstat(f.fileno()).st_mtime
            text = f.read(65536).decode(errors="replace")
        try:
            fields = json.loads(text)
            return Failure(str(fields["reason"]), int(fields["tries"]), str(fields["compiler"]), at)
        except (ValueError, KeyError, TypeError):  # the old one-line marker, or garbage: one failure
            return Failure(text.strip() or "the build failed", 1, "", at)

    def record_failure(self, name: str, reason: str, compiler: str) -> Failure:
        """Record that building `name` with `compiler` failed for `reason` (one more failure in a
        row with the same compiler). A record that cannot be written (a full disk) is let go: the
        next run tries again, one builder at a time."""
        try:
            previous = self.failure(name)
        except (OSError, CacheRefused):
            previous = None
        tries = previous.tries + 1 if previous is not None and previous.compiler == compiler else 1
        failure = Failure(reason, tries, compiler, time.time())
        record = {key: value for key, value in asdict(failure).items() if key != "at"}
        temporary = f".{_failure_name(name)}.{os.getpid()}.{time.monotonic_ns()}.tmp"
        try:
            self._write(temporary, json.dumps(record).encode())
            os.replace(temporary, _failure_name(name), src_dir_fd=self._fd, dst_dir_fd=self._fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=self._fd)
        return failure

    def forget_failure(self, name: str) -> None:
        """`name` was built: no failure to remember."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_failure_name(name), dir_fd=self._fd)

    # -- the builder lock ---------------------------------------------------------------------------

    def builder_lock(self, name: str) -> int | None:
        """A descriptor holding `name`'s builder lock (to hand to the builder), or None if a
        builder holds it already."""
        fd = os.open(f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self._fd)
        try:
            self._check(fd, f"{name}.lock")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None
            raise
        except BaseException:
            os.close(fd)
            raise
        return fd

    # -- the parts ----------------------------------------------------------------------------------

    def _check(self, fd: int, name: str) -> None:
        problem = file_problem(os.fstat(fd), NOT_WRITABLE)
        if problem is not None:
            raise CacheRefused(
                f"refusing {self.path / name}: it is not yours alone ({problem}); remove it; "
                "this run uses the Python hooks"
            )

    def _read_checked(self, name: str) -> bytes:
        fd = os.open(name, _READ, dir_fd=self._fd)
        with os.fdopen(fd, "rb") as f:
            self._check(f.fileno(), name)
            return f.read(4096)

    def _write(self, name: str, data: bytes) -> None:
        """Write a new file `name` (0644 less the umask), fsynced."""
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=self._fd)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    @contextlib.contextmanager
    def _install_lock(self, how: int) -> Iterator[None]:
        """The folder's install lock (see module doc); none where it cannot be taken (a folder
        this user may read but not write)."""
        try:
            fd = os.open(".install.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self._fd)
        except OSError:
            yield
            return
        try:
            fcntl.flock(fd, how)
            yield
        finally:
            os.close(fd)


def _digest_name(name: str) -> str:
    return f"{name}.sha256"


def _failure_name(name: str) -> str:
    return str(Path(name).with_suffix(".failed"))


def _sha256(fd: int) -> str:
    """The sha256 of what `fd` holds, read from its start (its own offset left as it was)."""
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()
