"""gradtui's compiled posthooks (posthooks.cpp): built once, against the torch they run with.

A planned pass's Python posthooks cost the engine a GIL round trip, a Python object per gradient
and the hook's bytecode at every hooked node: on tiny tensors that is most of a `continue`
pass's cost. The same hooks in C++ measure each gradient with the same kernels and
call Python only where the Python hook would decide something (gradtui.engine.hooks.planned says
where). They are an accelerator, never a requirement: with no compiler, on a torch whose headers
do not build them, or with `GRADTUI_NATIVE=off`, the Python hooks run, giving the same numbers.

`GRADTUI_NATIVE` says what to do:

- `auto` (the default): use them when built; when not, build them once in the background (a
  detached compiler child at low priority, ~15 s on 2 cores, which finishes even if this run ends
  first: this run uses the Python hooks, later runs the compiled ones). A build that failed is
  not retried until torch or the source changes (`build()` is).
- `use`: use them when built, never build (what the test suite's workers get once it built them).
- `off`: the Python hooks only.

The build is a plain compiler call (no ninja, no lock file): each build writes its own temporary
file and renames it into place, so builds at once cannot see a half-written library and a killed
one leaves nothing in the way. It lives in `$GRADTUI_CACHE` (default `~/.cache/gradtui`),
named by a hash of the source, torch's version and Python's, so an upgrade builds afresh.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import torch

SOURCE = Path(__file__).with_name("posthooks.cpp")
SOURCES = (SOURCE, *(SOURCE.with_name(part) for part in ("records.h", "hook.h", "walk.h", "fetch.h")))
"""The translation unit and the parts it includes (the library's name hashes them all)."""
MODULE = "gradtui_posthooks"
BUILD_TIMEOUT = 300.0
"""Seconds a build may take before it is given up (a cold compile is ~10-20 s on 2 cores)."""


class Native(NamedTuple):
    """The compiled posthooks' module, or None and why not (the bench's header shows it)."""

    module: ModuleType | None
    reason: str


_lock = threading.Lock()
_loaded: Native | None = None
_building: subprocess.Popen[bytes] | None = None
_started = False


def mode() -> str:
    """`GRADTUI_NATIVE`: auto, use or off (anything else reads as auto)."""
    value = os.environ.get("GRADTUI_NATIVE", "auto").strip().lower()
    return value if value in ("auto", "use", "off") else "auto"


def cache_dir() -> Path:
    """Where built libraries live."""
    root = os.environ.get("GRADTUI_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "gradtui")
    return Path(root) / "native"


def library_path() -> Path:
    """The built library for this source, torch and Python."""
    key = hashlib.sha256()
    for part in SOURCES:
        key.update(part.read_bytes())
    key.update(f"{torch.__version__}|{sys.version}|{sys.platform}".encode())
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return cache_dir() / f"{MODULE}-{key.hexdigest()[:16]}{suffix}"


def compile_command(output: Path) -> list[str] | None:
    """The compiler call that builds `output`, or None where gradtui does not build (no compiler,
    not Linux or macOS)."""
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None or sys.platform not in ("linux", "darwin"):
        return None
    from torch.utils import cpp_extension

    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    command = [compiler, "-O2", "-std=c++17", "-fPIC", "-shared", "-w",
               f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    for path in [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]:
        command += ["-isystem", path]
    command += [str(SOURCE), "-o", str(output), f"-L{torch_lib}", "-lc10", "-ltorch_cpu", "-ltorch", "-ltorch_python",
                f"-Wl,-rpath,{torch_lib}"]
    if sys.platform == "darwin":
        command += ["-undefined", "dynamic_lookup"]
    return command


def build(timeout: float = BUILD_TIMEOUT) -> Native:
    """Build the library now (in this thread, a compiler child process) and load it."""
    try:
        target = library_path()
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return Native(None, f"no cache folder to build into: {type(exc).__name__}: {exc}")
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    command = compile_command(temporary)
    if command is None:
        return _failed(target, "no C++ compiler (set CXX) or not Linux or macOS")
    try:
        done = subprocess.run(command, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:  # a busy machine, a missing compiler: try again next time
        temporary.unlink(missing_ok=True)
        return Native(None, f"the compiler did not finish ({type(exc).__name__})")
    if done.returncode != 0:
        temporary.unlink(missing_ok=True)
        lines = [line for line in done.stderr.decode(errors="replace").splitlines() if "error" in line]
        if done.returncode < 0 or not lines:  # killed (out of memory, say), not refused: try again next time
            return Native(None, f"the compiler ended with status {done.returncode}")
        return _failed(target, f"the build failed: {lines[0][:200]}")
    os.replace(temporary, target)
    _marker(target).unlink(missing_ok=True)
    return _import(target)


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
        except OSError as exc:  # a source file missing, a cache folder we may not read
            _loaded = Native(None, f"{type(exc).__name__}: {exc}")
        return _loaded


def _found() -> Native:
    how = mode()
    if how == "off":
        return Native(None, "GRADTUI_NATIVE=off")
    target = library_path()
    if target.exists():
        return _import(target)
    if (failed := _marker(target)).exists():
        return Native(None, failed.read_text(errors="replace").strip() or "the build failed")
    if how == "auto" and not _started:
        _start_background_build()
        return Native(None, "being built (this run uses the Python hooks)")
    return Native(None, "not built (python -m gradtui.engine.hooks.native builds it)")


def _import(target: Path) -> Native:
    try:
        loader = importlib.machinery.ExtensionFileLoader(MODULE, str(target))
        spec = importlib.util.spec_from_file_location(MODULE, target, loader=loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - a library that does not load is a build to redo
        return Native(None, f"the built library did not load: {type(exc).__name__}: {exc}")
    return Native(module, "")


def _marker(target: Path) -> Path:
    """Where a refused build of `target` leaves its reason (so no run tries it again)."""
    return target.with_suffix(".failed")


def _failed(target: Path, reason: str) -> Native:
    try:
        _marker(target).write_text(reason + "\n")
    except OSError:
        pass
    return Native(None, reason)


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


def _start_background_build() -> None:
    """A detached build at low priority. It outlives this process if it must (a short run still
    leaves the library built for the next one), and ends by itself: the compiler has
    BUILD_TIMEOUT."""
    global _building, _started
    _started = True
    if not sys.executable:
        return
    try:  # no preexec_fn: this process may have threads (the child lowers its own priority)
        _building = subprocess.Popen(background_command(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return
