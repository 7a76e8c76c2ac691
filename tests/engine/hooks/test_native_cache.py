"""The compiled posthooks' cache (gradtui.engine.hooks.native.cache) as a hostile or careless
local user finds it: `gradtui` runs in subprocesses, each with a cache folder of its own
(GRADTUI_CACHE). A damaged library is said in one line and replaced, never loaded; a library,
folder or failure record another user made is refused in one line, never loaded or believed; a
failed build is recorded in its own words and tried again later, by one builder; GRADTUI_NATIVE
reads the usual boolean spellings and refuses the rest.

No test here runs the real compiler: the suite's controller built the library once
(tests/conftest.py), and a "compiler" that copies it stands in where a rebuild is wanted.
"""

from __future__ import annotations

import errno
import hashlib
import os
import random
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from gradtui.engine.hooks import native
from tests.helpers import assert_grads_identical, run_plain, script

pytestmark = pytest.mark.timeout(300)

SCRIPT = script("mlp.py")
RUN_TIMEOUT = 120.0
BUILT = native.library_path()
"""The suite's own library (tests/conftest.py built it), named as every cache here names it."""
NAME = BUILT.name
needs_built = pytest.mark.skipif(not BUILT.exists(), reason="no compiled library here to damage or stand in")


def _env(cache: Path, **more: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("XDG_CACHE_HOME", "CXX")}
    env.update({"GRADTUI_CACHE": str(cache), "GRADTUI_NATIVE": "auto"})
    env.update(more)
    return env


def _gradtui(env: dict[str, str], out: Path) -> subprocess.CompletedProcess[str]:
    """`gradtui --headless -c 'break nan' -c continue mlp.py OUT`: a hooked pass in continue."""
    return subprocess.run(
        [sys.executable, "-m", "gradtui", "--headless", "-c", "break nan", "-c", "continue", SCRIPT, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        cwd=out.parent,
    )


def _plain(tmp_path: Path) -> dict[str, torch.Tensor]:
    out = tmp_path / "plain.pt"
    run_plain(SCRIPT, [str(out)])
    return torch.load(out)


def _builders(cache: Path) -> list[int]:
    """The background builders (of any gradtui) that build into `cache`."""
    found = []
    wanted = f"GRADTUI_CACHE={cache}".encode() + b"\0"
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"gradtui.engine.hooks.native" not in f.read():
                    continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                if wanted in f.read() + b"\0":
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _wait_builders(cache: Path, timeout: float = 120.0) -> None:
    """Until no background builder for `cache` runs (they are detached: not our children)."""
    deadline = time.monotonic() + timeout
    while _builders(cache):
        if time.monotonic() > deadline:
            pytest.fail(f"background builders for {cache} still running after {timeout}s: {_builders(cache)}")
        time.sleep(0.1)


def _compiler(tmp_path: Path, then: str) -> tuple[Path, Path]:
    """A stand-in compiler that logs each call to a file, then runs `then` ("$out": its -o)."""
    log = tmp_path / "compiler-calls"
    cxx = tmp_path / "cxx"
    cxx.write_text(
        f"#!/bin/sh\necho called >> '{log}'\nfor a; do if [ \"$prev\" = -o ]; then out=$a; fi; prev=$a; done\n{then}\n"
    )
    cxx.chmod(0o755)
    return cxx, log


def _calls(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def _private_cache(tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    (cache / "native").mkdir(parents=True)
    for each in (cache, cache / "native"):
        each.chmod(0o700)
    return cache


@needs_built
@pytest.mark.parametrize("damage", ["truncated", "random bytes"])
def test_a_damaged_library_is_one_line_the_python_hooks_and_a_rebuild(tmp_path, damage):
    """Truncated to half (a Bus error before), or 50 bytes rewritten (a Segmentation fault
    before): one line on stderr, the Python hooks, torch's gradients, exit 0; the background
    rebuild replaces it, and the next run (GRADTUI_NATIVE=on: it would say why not) loads it."""
    cache = _private_cache(tmp_path)
    library = cache / "native" / NAME
    shutil.copy(BUILT, library)
    if Path(f"{BUILT}.sha256").exists():
        shutil.copy(f"{BUILT}.sha256", f"{library}.sha256")
    data = bytearray(library.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:
        at = len(data) // 3
        data[at : at + 50] = random.Random(7).randbytes(50)
    library.write_bytes(bytes(data))
    cxx, log = _compiler(tmp_path, f"exec cp '{BUILT}' \"$out\"")
    env = _env(cache, CXX=str(cxx))

    done = _gradtui(env, tmp_path / "first.pt")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "damaged" in lines[0] and "Python hooks" in lines[0], done.stderr
    assert "damaged" not in done.stdout
    assert_grads_identical(_plain(tmp_path), torch.load(tmp_path / "first.pt"))

    _wait_builders(cache)
    assert _calls(log) == 1
    again = _gradtui({**env, "GRADTUI_NATIVE": "on"}, tmp_path / "second.pt")
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert_grads_identical(_plain(tmp_path), torch.load(tmp_path / "second.pt"))


def _planted_library(tmp_path: Path, marker: Path) -> bytes:
    """A shared library whose constructor writes `marker` (what loading it would run)."""
    source = tmp_path / "planted.c"
    source.write_text(
        "#include <stdio.h>\n"
        f'__attribute__((constructor)) static void planted(void) {{ FILE *f = fopen("{marker}", "w");'
        ' if (f) { fputs("ran", f); fclose(f); } }\n'
    )
    built = tmp_path / "planted.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(built), str(source)], check=True, timeout=60, capture_output=True
    )
    return built.read_bytes()


def _as_nobody(path: Path, mode: int) -> None:
    nobody = 65534
    os.chown(path, nobody, nobody)
    path.chmod(mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="planting a file as another user needs root (chown)")
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the planted library")
@pytest.mark.parametrize("planted", ["folder and library", "library", "failure record"])
def test_what_another_user_planted_is_refused_in_one_line_and_never_run(tmp_path, planted):
    """GRADTUI_CACHE a 1777 folder: `native/` made by nobody with a library in it (its digest
    beside it: anyone can compute one); or our own `native/` holding nobody's library; or a
    failure record of nobody's that would turn the compiled hooks off. Refused in one line,
    the library's constructor never run, torch's gradients, exit 0."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    folder = shared / "native"
    folder.mkdir()
    folder.chmod(0o700)
    marker = tmp_path / "constructor-ran"
    planted_bytes = _planted_library(tmp_path, marker)
    if planted == "failure record":
        record = (folder / NAME).with_suffix(".failed")
        record.write_text("the build failed: planted\n")
        _as_nobody(record, 0o644)
    else:
        library = folder / NAME
        library.write_bytes(planted_bytes)
        digest = Path(f"{library}.sha256")
        digest.write_text(hashlib.sha256(planted_bytes).hexdigest() + "\n")
        for each in (library, digest):
            _as_nobody(each, 0o755)
        if planted == "folder and library":
            _as_nobody(folder, 0o777)
    cxx, log = _compiler(tmp_path, "exit 1")

    done = _gradtui(_env(shared, CXX=str(cxx)), tmp_path / "grads.pt")
    assert not marker.exists(), "the planted library's constructor ran"
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "refusing" in lines[0] and "uid 65534" in lines[0], done.stderr
    assert_grads_identical(_plain(tmp_path), torch.load(tmp_path / "grads.pt"))
    _wait_builders(shared)
    assert _calls(log) == 0  # nothing built over what was refused


@pytest.fixture
def tiny_filesystem(tmp_path):
    """A 256 KiB tmpfs (a full disk for a build); skipped where this process may not mount."""
    where = tmp_path / "small"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k,mode=700", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        _wait_builders(where)
        # NOTE: on a loaded machine a file the build opened can still be closing when the
        # builders are gone ("target is busy"): then detach it lazily, so no mount outlives the test.
        if subprocess.run(["umount", str(where)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (its linker is what fills the disk)")
def test_a_full_disk_is_recorded_in_its_own_words_and_tried_again_later(tmp_path, tiny_filesystem):
    """A real link into a full filesystem: the linker says "No space left on device", collect2
    says "ld returned 1". The record keeps the first; no run retries before the back-off (an
    hour), the first run after it does."""
    big = tmp_path / "big.c"
    big.write_text("char big[4 << 20] = {1};\n")
    cxx, log = _compiler(tmp_path, f"exec cc -shared -fPIC -o \"$out\" '{big}'")
    env = _env(tiny_filesystem, CXX=str(cxx))

    built = subprocess.run(
        [sys.executable, "-m", "gradtui.engine.hooks.native"],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert built.returncode == 1 and "No space left on device" in built.stdout, built.stdout + built.stderr
    record = (tiny_filesystem / "native" / NAME).with_suffix(".failed")
    assert "No space left on device" in record.read_text()
    assert _calls(log) == 1

    done = _gradtui(env, tmp_path / "grads.pt")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    _wait_builders(tiny_filesystem)
    assert _calls(log) == 1  # not retried within the back-off

    failed_at = record.stat().st_mtime - 3700  # as if it failed an hour and a bit ago
    os.utime(record, (failed_at, failed_at))
    done = _gradtui(env, tmp_path / "grads.pt")
    assert done.returncode == 0, done.stderr
    _wait_builders(tiny_filesystem)
    assert _calls(log) == 2  # retried once, by one builder
    assert_grads_identical(_plain(tmp_path), torch.load(tmp_path / "grads.pt"))


def test_a_failing_compiler_gets_one_builder_across_runs(tmp_path):
    """CXX a compiler that fails at once (as /bin/false does, logging each call): three runs one
    after another, then three at once, start one builder between them (the builder lock, and
    the failure's back-off after it)."""
    cache = tmp_path / "cache"
    cxx, log = _compiler(tmp_path, "exit 1")
    env = _env(cache, CXX=str(cxx))
    for i in range(3):
        done = _gradtui(env, tmp_path / f"grads{i}.pt")
        assert done.returncode == 0 and done.stderr == "", done.stderr
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "gradtui", "--headless", "-c", "continue", SCRIPT, str(tmp_path / f"at-once{i}.pt")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    try:
        for run in runs:
            _, err = run.communicate(timeout=RUN_TIMEOUT)
            assert run.returncode == 0, err
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
                run.wait(timeout=10)
    _wait_builders(cache)
    assert _calls(log) == 1
    record = (cache / "native" / NAME).with_suffix(".failed")
    assert "status 1" in record.read_text()


@pytest.mark.parametrize("value", ["0", "false", "no", "off", "none", "disable", "OFF", " False "])
def test_the_usual_spellings_of_off_turn_the_compiled_hooks_off(monkeypatch, tmp_path, value):
    """Off builds nothing, loads nothing, and does not touch the cache."""
    monkeypatch.setenv("GRADTUI_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GRADTUI_NATIVE", value)
    monkeypatch.setattr(native, "background_command", lambda: ["true"])
    for name, state in (("_loaded", None), ("_building", None), ("_started", False)):
        monkeypatch.setattr(native, name, state)
    try:
        assert native.load() == native.Native(None, "GRADTUI_NATIVE=off")
    finally:
        native.wait(10)
        monkeypatch.setattr(native, "_loaded", None)  # the next test loads the suite's own afresh
    assert not (tmp_path / "cache").exists()


@needs_built
@pytest.mark.parametrize("value", ["1", "true", "yes", "on", "auto", "use"])
def test_the_usual_spellings_of_on_use_them(monkeypatch, value):
    monkeypatch.setenv("GRADTUI_NATIVE", value)
    monkeypatch.setattr(native, "_loaded", None)
    try:
        assert native.load().module is not None, native.load().reason
    finally:
        monkeypatch.setattr(native, "_loaded", None)


def test_a_setting_not_understood_is_one_line_and_exit_2_before_the_script_runs(tmp_path):
    env = _env(tmp_path / "cache", GRADTUI_NATIVE="maybe")
    done = _gradtui(env, tmp_path / "grads.pt")
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "GRADTUI_NATIVE='maybe'" in lines[0] and "off" in lines[0], done.stderr
    assert not (tmp_path / "grads.pt").exists() and not (tmp_path / "cache").exists()


def test_the_cache_honours_xdg_cache_home_and_is_made_private(monkeypatch, tmp_path):
    monkeypatch.delenv("GRADTUI_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert native.cache_dir() == tmp_path / "xdg" / "gradtui" / "native"
    monkeypatch.setattr(native, "compile_command", lambda out: ["sh", "-c", "exit 1"])
    native.build(timeout=30)
    for folder in (tmp_path / "xdg" / "gradtui", tmp_path / "xdg" / "gradtui" / "native"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/xdg")  # the XDG spec: a relative one is ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert native.cache_dir() == tmp_path / "home" / ".cache" / "gradtui" / "native"


@needs_built
def test_a_full_disk_at_the_library_s_fsync_is_recorded_in_its_own_words(monkeypatch, tmp_path):
    """Where no tmpfs can be mounted: the disk fills as the built library is made durable (an
    fsync's ENOSPC, as delayed allocation reports it). The reason is the system's, nothing
    half-written is left in place, and it is tried again after the back-off."""
    monkeypatch.setenv("GRADTUI_CACHE", str(tmp_path))
    monkeypatch.setattr(native, "compile_command", lambda out: ["cp", str(BUILT), str(out)])

    real_fsync, calls = os.fsync, []

    def full_once(fd: int) -> None:  # the library's fsync fails; the small record after it fits
        calls.append(fd)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    with monkeypatch.context() as patched:
        patched.setattr(os, "fsync", full_once)
        built = native.build(timeout=30)
    assert built.module is None and "No space left on device" in built.reason
    with native.Cache.open() as cache:
        failure = cache.failure(NAME)
    assert failure is not None and "No space left on device" in failure.reason
    assert not failure.due(native.compiler_identity(), failure.at) and failure.due(
        native.compiler_identity(), failure.at + 3600
    )
    assert sorted(p.name for p in (tmp_path / "native").iterdir() if not p.name.endswith(".lock")) == [
        Path(NAME).with_suffix(".failed").name
    ]


def test_no_compiler_is_tried_again_once_one_is_installed(monkeypatch, tmp_path):
    monkeypatch.setenv("GRADTUI_CACHE", str(tmp_path))
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    built = native.build(timeout=30)
    assert built.module is None and "no C++ compiler" in built.reason
    with native.Cache.open() as cache:
        failure = cache.failure(NAME)
    assert failure is not None and not failure.due(native.compiler_identity(), failure.at)
    installed = tmp_path / "empty" / "c++"
    installed.parent.mkdir()
    installed.write_text("#!/bin/sh\nexit 1\n")
    installed.chmod(0o755)
    assert failure.due(native.compiler_identity(), failure.at)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build a library that does not load")
def test_a_library_that_does_not_load_is_rebuilt_later_not_at_every_run(tmp_path):
    """Its own bytes (the digest matches) but no module in it: removed and recorded as a failed
    build, so later runs neither load it again nor start a builder before the back-off. (In
    subprocesses: a process that loaded the real library keeps its module by path.)"""
    source = tmp_path / "empty.c"
    source.write_text("int nothing_here;\n")
    cache = tmp_path / "cache"
    cxx, log = _compiler(tmp_path, f"exec cc -shared -fPIC -o \"$out\" '{source}'")
    env = _env(cache, CXX=str(cxx))
    built = subprocess.run(
        [sys.executable, "-m", "gradtui.engine.hooks.native"],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert built.returncode == 1 and "did not load" in built.stdout, built.stdout + built.stderr
    assert not (cache / "native" / NAME).exists()
    for _ in range(2):
        done = _gradtui({**env, "GRADTUI_NATIVE": "on"}, tmp_path / "grads.pt")
        assert done.returncode == 0, done.stderr
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and "did not load" in lines[0] and "tried again after" in lines[0], done.stderr
    _wait_builders(cache)
    assert _calls(log) == 1
    assert_grads_identical(_plain(tmp_path), torch.load(tmp_path / "grads.pt"))
