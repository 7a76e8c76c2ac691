"""gradtui's compiled posthooks (posthooks.cpp): built once, against the torch they run with.

A planned pass's Python posthooks cost the engine a GIL round trip, a Python object per gradient
and the hook's bytecode at every hooked node: on tiny tensors that is most of a `continue`
pass's cost. The same hooks in C++ measure each gradient with the same kernels and call Python
only where the Python hook would decide something (gradtui.engine.hooks.planned says where).
They are an accelerator, never a requirement: with no compiler, on a torch whose headers do not
build them, with a cache that is not the user's alone, or with `GRADTUI_NATIVE=off`, the Python
hooks run, giving the same numbers.

`GRADTUI_NATIVE` (gradtui.engine.hooks.native.setting) says what to do: `auto` (the default) uses
them when built and, when not, builds them in the background (a detached compiler child at low
priority, ~15 s on 2 cores, which finishes even if this run ends first: this run uses the Python
hooks, later runs the compiled ones); `on` does the same and says why a run does not use them;
`use` never builds; `off` neither builds nor loads.

The build is a plain compiler call into a temporary file of its own, installed with its digest
(gradtui.engine.hooks.native.cache: the folder, its checks, the digest, the failure records and
their back-off, the one-builder lock), named by a hash of the source, torch's version and
Python's, so an upgrade builds afresh. `prepare()` is called as an agent starts, before the
script's output is captured: what the user must be told (a damaged or refused library, a
setting not understood) is one line on gradtui's stderr then, never in the script's output.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import torch

from gradtui.engine.hooks.native import cache as _cache
from gradtui.engine.hooks.native.cache import Cache, CacheRefused, Damaged, Verified
from gradtui.engine.hooks.native.setting import Mode, SettingError
from gradtui.engine.hooks.native.setting import mode as mode

SOURCE = Path(__file__).with_name("posthooks.cpp")
SOURCES = (
    SOURCE,
    *(
        SOURCE.with_name(part)
        for part in ("records.h", "extremes.h", "hook.h", "visit.h", "walk.h", "fetch.h", "sketch.h")
    ),
)
"""The translation unit and the parts it includes (the library's name hashes them all)."""
MODULE = "gradtui_posthooks"
LAYOUT = "sha256-recorded"
"""In the library's name: a library from before digests were recorded is not this one (it is
left alone, never loaded)."""
BUILD_TIMEOUT = 300.0
"""Seconds a build may take before it is given up (a cold compile is ~10-20 s on 2 cores)."""
_SYSTEM_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EIO, errno.ENOMEM, errno.EMFILE)
"""The system's errors whose words, in a compiler's or linker's output, are the real reason."""


class Native(NamedTuple):
    """The compiled posthooks' module, or None and why not (the bench's header shows it);
    `notice`: the line the user must be told, if any (gradtui's stderr, as the run starts)."""

    module: ModuleType | None
    reason: str
    notice: str = ""


_lock = threading.Lock()
_loaded: Native | None = None
_building: subprocess.Popen[bytes] | None = None
_started = False
_told = False


def cache_dir() -> Path:
    """Where built libraries live (gradtui.engine.hooks.native.cache.folder)."""
    return _cache.folder()


def library_name() -> str:
    """The built library's file name for this source, torch and Python."""
    key = hashlib.sha256()
    for part in SOURCES:
        key.update(part.read_bytes())
    key.update(f"{torch.__version__}|{sys.version}|{sys.platform}|{LAYOUT}".encode())
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return f"{MODULE}-{key.hexdigest()[:16]}{suffix}"


def library_path() -> Path:
    """The built library for this source, torch and Python."""
    return cache_dir() / library_name()


def compiler() -> str | None:
    """The C++ compiler a build would run (`CXX`, else c++, g++ or clang++ on PATH), or None."""
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")


def compiler_identity() -> str:
    """Which compiler a build would run, as a failure record keeps it: its path, size and mtime
    (another compiler, installed or upgraded, retries a failed build at once); "" for none."""
    found = compiler()
    if found is None:
        return ""
    resolved = shutil.which(found) or found
    try:
        st = os.stat(resolved)
    except OSError:
        return resolved
    return f"{resolved}|{st.st_size}|{st.st_mtime_ns}"


def compile_command(output: Path) -> list[str] | None:
    """The compiler call that builds `output`, or None where gradtui does not build (no compiler,
    not Linux or macOS)."""
    found = compiler()
    if found is None or sys.platform not in ("linux", "darwin"):
        return None
    from torch.utils import cpp_extension

    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    command = [
        found,
        "-O2",
        "-std=c++17",
        "-fPIC",
        "-shared",
        "-w",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
    ]
    for path in [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]:
        command += ["-isystem", path]
    command += [
        str(SOURCE),
        "-o",
        str(output),
        f"-L{torch_lib}",
        "-lc10",
        "-ltorch_cpu",
        "-ltorch",
        "-ltorch_python",
        f"-Wl,-rpath,{torch_lib}",
    ]
    if sys.platform == "darwin":
        command += ["-undefined", "dynamic_lookup"]
    return command


def build(timeout: float = BUILD_TIMEOUT) -> Native:
    """Build the library now (in this thread, a compiler child process), install it with its
    digest and load it. Whatever fails is recorded, in its own words, to be retried later
    (gradtui.engine.hooks.native.cache); the background builder runs this."""
    try:
        opened = Cache.open()
        name = library_name()
    except (OSError, CacheRefused) as exc:
        return Native(None, f"no cache folder to build into: {type(exc).__name__}: {exc}")
    with opened as cache:
        return _build(cache, name, timeout)


def _build(cache: Cache, name: str, timeout: float) -> Native:
    who = compiler_identity()
    temporary = cache.temporary(name)
    command = compile_command(temporary)
    if command is None:
        return _failed(cache, name, "no C++ compiler (set CXX) or not Linux or macOS", who)
    try:
        done = subprocess.run(command, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        temporary.unlink(missing_ok=True)
        return _failed(cache, name, f"the compiler did not finish in {timeout:g} s", who)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        return _failed(cache, name, f"the compiler could not be run: {exc}", who)
    if done.returncode != 0:
        temporary.unlink(missing_ok=True)
        return _failed(cache, name, _why(done.stderr.decode(errors="replace"), done.returncode), who)
    try:
        cache.install(temporary, name)
    except OSError as exc:
        return _failed(cache, name, f"the built library could not be stored: {exc}", who)
    cache.forget_failure(name)
    return _verified(cache, name)


def _why(output: str, status: int) -> str:
    """A failed compiler call's reason, in its own words: the system's error where one is named
    (a full disk: the linker's "No space left on device", not collect2's summary), else the
    first error, else how it ended."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for code in _SYSTEM_ERRORS:
        said = [line for line in lines if os.strerror(code) in line]
        if said:
            return f"the build failed: {said[0][:300]}"
    errors = [line for line in lines if "error" in line.lower()]
    if errors:
        return f"the build failed: {errors[0][:300]}"
    ended = f"was killed by signal {-status}" if status < 0 else f"ended with status {status}"
    return f"the compiler {ended}" + (f": {lines[-1][:300]}" if lines else "")


def _failed(cache: Cache, name: str, reason: str, compiler_id: str) -> Native:
    failure = cache.record_failure(name, reason, compiler_id)
    return Native(
        None,
        f"{failure.reason} (tried again after {time.strftime('%H:%M', time.localtime(failure.retry_at()))}"
        " or with another compiler)",
    )


def prepare() -> str | None:
    """Load the compiled posthooks now (or start their build), as an agent starts and before the
    script's output is captured; the line the user must be told, the first time there is one."""
    global _told
    native = load()
    if not native.notice or _told:
        return None
    _told = True
    return native.notice


def load() -> Native:
    """The compiled posthooks for this process (loaded once), as `GRADTUI_NATIVE` says; in `auto`
    with none built, a background build starts (once) and this answers None until a call after
    it ended finds the library. Never raises: whatever goes wrong is the reason."""
    global _loaded, _building
    loaded = _loaded
    if loaded is not None and (_building is None or _building.poll() is None):
        return loaded
    with _lock:
        if _building is not None and _building.poll() is not None:
            _building = None  # the background build ended: look once more
        elif _loaded is not None:
            return _loaded
        try:
            _loaded = _found()
        except SettingError as exc:
            _loaded = Native(None, str(exc), f"{exc}; this run uses the Python hooks")
        except CacheRefused as exc:
            _loaded = Native(None, str(exc), str(exc))
        except OSError as exc:  # a source file missing, a cache folder we may not read
            _loaded = Native(None, f"{type(exc).__name__}: {exc}")
        return _loaded


def _found() -> Native:
    how = mode()
    if how is Mode.OFF:
        return Native(None, "GRADTUI_NATIVE=off")
    name = library_name()
    with Cache.open() as cache:
        found = cache.library(name)
        match found:
            case Verified():
                loaded = _verified(cache, name, found)
                if loaded.module is None and how is Mode.ON:
                    return loaded._replace(notice=f"{loaded.reason}; this run uses the Python hooks")
                return loaded
            case Damaged(why):
                cache.discard(name)
                line = f"{why}: this run uses the Python hooks, " + (
                    "a background build replaces them"
                    if how in (Mode.AUTO, Mode.ON) and _start_background_build(cache, name)
                    else "python -m gradtui.engine.hooks.native rebuilds them"
                )
                return Native(None, why, line)
        failure = cache.failure(name)
        if failure is not None and not failure.due(compiler_identity(), time.time()):
            when = time.strftime("%H:%M", time.localtime(failure.retry_at()))
            reason = f"not built: {failure.reason} (tried again after {when} or with another compiler)"
            return Native(None, reason, f"{reason}; this run uses the Python hooks" if how is Mode.ON else "")
        if how is Mode.USE:
            return Native(None, "not built (python -m gradtui.engine.hooks.native builds it)")
        if _started:
            return Native(None, "being built (this run uses the Python hooks)")
        started = _start_background_build(cache, name)
        reason = (
            "being built (this run uses the Python hooks)"
            if started
            else "being built by another run (this run uses the Python hooks)"
        )
        return Native(None, reason, f"the compiled posthooks are {reason}" if how is Mode.ON else "")


def _verified(cache: Cache, name: str, found: Verified | Damaged | None = None) -> Native:
    """Load `name` from `cache`, verified (looked up if `found` is not given). A library of its
    own bytes that does not load is a build to redo, later: removed, and recorded as a failure."""
    if found is None:
        found = cache.library(name)
    match found:
        case Verified():
            try:
                loaded = _import(found.path)
            finally:
                found.close()
            if loaded.module is None:
                cache.discard(name)
                cache.record_failure(name, loaded.reason, compiler_identity())
            return loaded
        case Damaged(why):
            return Native(None, why, why)
    return Native(None, "not built")


def _import(path: str) -> Native:
    try:
        loader = importlib.machinery.ExtensionFileLoader(MODULE, path)
        spec = importlib.util.spec_from_file_location(MODULE, path, loader=loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - a library that does not load is a build to redo
        return Native(None, f"the built library did not load: {type(exc).__name__}: {exc}")
    return Native(module, "")


def background_command() -> list[str]:
    """What a background build runs: this package's builder, in a child process at low priority."""
    return [sys.executable, "-m", "gradtui.engine.hooks.native", "--quiet", "--nice"]


def wait(timeout: float) -> bool:
    """Wait up to `timeout` seconds for this process's background build, if one runs: has it ended?"""
    if _building is None:
        return True
    try:
        _building.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


def _start_background_build(cache: Cache, name: str) -> bool:
    """A detached build at low priority, unless a builder runs already (its lock is taken here
    and handed to the child, which holds it for its life: gradtui.engine.hooks.native.cache) or
    one just failed (its record is read again under the lock). It
    outlives this process if it must (a short run still leaves the library built for the next
    one), and ends by itself: the compiler has BUILD_TIMEOUT. Did this start one?"""
    global _building, _started
    _started = True
    if not sys.executable:
        return False
    try:
        lock = cache.builder_lock(name)
    except (OSError, CacheRefused):
        return False
    if lock is None:
        return False
    try:  # a builder that ended just now may have recorded a failure: read under the lock
        failure = cache.failure(name)
    except (OSError, CacheRefused):
        failure = None
    if failure is not None and not failure.due(compiler_identity(), time.time()):
        os.close(lock)
        return False
    try:  # no preexec_fn: this process may have threads (the child lowers its own priority)
        _building = subprocess.Popen(
            background_command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=(lock,),
        )
    except OSError:
        return False
    finally:
        os.close(lock)
    return True
