"""A runtime folder that is not private: one line naming it and what to do, exit 2, for both
`--listen` and `attach`; GRADTUI_RUNTIME_DIR names a private one instead."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gradtui.wire import runtime
from tests.helpers import SCRIPTS


@pytest.fixture
def shared_tmp(tmp_path, monkeypatch):
    """No GRADTUI_RUNTIME_DIR nor XDG_RUNTIME_DIR, TMPDIR a folder of the test's: the default
    runtime folder is TMPDIR/gradtui-UID, which someone made world-writable first."""
    monkeypatch.delenv("GRADTUI_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(runtime.tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    folder = tmp_path / f"gradtui-{os.getuid()}"
    folder.mkdir()
    folder.chmod(0o777)
    return folder


def gradtui(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gradtui", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def assert_one_line_naming(done: subprocess.CompletedProcess, folder) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert str(folder) in lines[0] and "not private" in lines[0] and "GRADTUI_RUNTIME_DIR" in lines[0]
    assert "Traceback" not in done.stderr


def test_listen_and_attach_refuse_a_world_writable_runtime_folder_in_one_line(shared_tmp, tmp_path, monkeypatch):
    assert_one_line_naming(gradtui("--listen", "127.0.0.1:0", str(SCRIPTS / "chain.py")), shared_tmp)
    assert_one_line_naming(gradtui("attach", "--headless", "-c", "continue"), shared_tmp)
    assert not any(shared_tmp.iterdir())  # nothing was written to it
    mine = tmp_path / "mine"  # the fallback the message names
    monkeypatch.setenv("GRADTUI_RUNTIME_DIR", str(mine))
    done = gradtui("attach", "--headless", "-c", "continue")
    assert done.returncode == 2 and "no running agent" in done.stderr, done.stderr
    assert (mine.stat().st_mode & 0o777) == 0o700


def test_a_runtime_folder_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("GRADTUI_RUNTIME_DIR", str(folder))
    monkeypatch.setattr(runtime.os, "getuid", lambda: os.stat(folder).st_uid + 1)  # as another user sees it
    with pytest.raises(runtime.RuntimeDirError, match="owned by uid"):
        runtime.runtime_dir()


def test_a_runtime_folder_under_xdg_that_is_open_to_others_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("GRADTUI_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    (tmp_path / "gradtui").mkdir()
    (tmp_path / "gradtui").chmod(0o755)
    with pytest.raises(runtime.RuntimeDirError, match=r"mode 755.*chmod 700"):
        runtime.running_agents()


def test_the_advice_works_after_a_first_run_made_the_compiled_hooks_cache(tmp_path, monkeypatch):
    """The folder the error suggests is not one gradtui makes for something else (the compiled
    posthooks' cache, which a first run makes under ~/.cache): following the advice gives a
    private runtime folder, apart from the cache."""
    home = tmp_path / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("GRADTUI_CACHE", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), CXX="/bin/false")
    subprocess.run(
        [sys.executable, "-m", "gradtui.engine.hooks.native", "--quiet"], env=env, timeout=120, capture_output=True
    )  # a first run's (failed) build: the cache folder exists now
    cache = home / ".cache" / "gradtui"
    assert cache.is_dir()
    monkeypatch.setenv("HOME", str(home))
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o755)
    monkeypatch.setenv("GRADTUI_RUNTIME_DIR", str(open_folder))
    with pytest.raises(runtime.RuntimeDirError) as refused:
        runtime.runtime_dir()
    advised = re.search(r"GRADTUI_RUNTIME_DIR=(\S+?)[,)]", str(refused.value))
    assert advised is not None, refused.value
    monkeypatch.setenv("GRADTUI_RUNTIME_DIR", advised.group(1))
    folder = Path(runtime.runtime_dir())
    assert folder.is_dir() and not folder.resolve().is_relative_to(cache.resolve())
