"""A runtime folder that is not private: one line naming it and what to do, exit 2, for both
`--listen` and `attach`; GRADTUI_RUNTIME_DIR names a private one instead."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gradtui.wire import runtime
from tests.wire.wire_helpers import SCRIPTS


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
    return subprocess.run([sys.executable, "-m", "gradtui", *args], capture_output=True, text=True,
                          env=dict(os.environ), timeout=120, stdin=subprocess.DEVNULL)


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
