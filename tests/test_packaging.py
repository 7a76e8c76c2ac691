"""The package as a user installs it: the wheel built from pyproject, installed (not editable)
into a fresh venv, runs the bundled demo headless.

An editable install reads every file from the checkout, so a file the wheel leaves out (a
stylesheet, the demo, the compiled posthooks' sources after a move) goes unnoticed until a user
installs from PyPI. This builds the wheel from a copy of the files that go into it (or takes the
one `.ci/run` built, `GRADTUI_WHEEL`), installs it with `--no-deps` into a venv whose only other
packages are the running environment's (a .pth line naming its site-packages: no download, no
second torch), and runs `gradtui` from an empty folder, so nothing of the checkout can be imported.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "gradtui")
"""What a wheel is built from: the project's metadata, its readme and licence, the package."""

NATIVE_SOURCES = {"posthooks.cpp", "records.h", "hook.h", "visit.h", "walk.h", "fetch.h", "sketch.h"}


def _run(args: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run a command to its end (bounded), its output kept for the assertion's message."""
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def _build_wheel(tmp: Path) -> Path:
    """The wheel `.ci/run` built, or one built here from a copy of the sources (never in the checkout)."""
    if given := os.environ.get("GRADTUI_WHEEL"):
        return Path(given)
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    out = tmp / "wheelhouse"
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)], tmp, 400)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = out.glob("gradtui-*.whl")
    return wheel


def _venv_over_this_environment(tmp: Path) -> Path:
    """A fresh venv (no pip, nothing installed) that sees this environment's packages after its own."""
    venv = tmp / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp, 120)
    assert made.returncode == 0, made.stdout + made.stderr
    python = venv / "bin" / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp, 60)
    here = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
    # A plain path line: that folder joins sys.path after the venv's own, and its own .pth files
    # (the editable install's finder among them) are not run, so `gradtui` is the wheel's.
    Path(purelib.stdout.strip(), "_this_environment.pth").write_text("".join(f"{p}\n" for p in sorted(here)))
    return venv


def test_the_built_wheel_installs_and_runs_the_demo_headless(tmp_path):
    wheel = _build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {f"gradtui/engine/hooks/native/{name}" for name in NATIVE_SOURCES} <= names, sorted(names)
    assert {"gradtui/ui/gradtui.tcss", "gradtui/examples/demo.py"} <= names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names), sorted(names)

    venv = _venv_over_this_environment(tmp_path)
    python = venv / "bin" / "python"
    installed = _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        tmp_path,
        300,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(GRADTUI_NATIVE="off", GRADTUI_CACHE=str(tmp_path / "cache"), GRADTUI_RUNTIME_DIR=str(tmp_path / "run"))
    probe = _run(
        [
            str(python),
            "-c",
            "import gradtui, importlib.metadata as m, importlib.resources as r; print(gradtui.__file__); "
            "print(m.metadata('gradtui')['License-Expression']); "
            "print(r.files('gradtui.engine.hooks.native').joinpath('posthooks.cpp').is_file())",
        ],
        elsewhere,
        120,
        env,
    )
    assert probe.returncode == 0, probe.stdout + probe.stderr
    where, licence, native = probe.stdout.split()
    assert Path(where).resolve().is_relative_to(venv.resolve()), where
    assert (licence, native) == ("MIT", "True")

    demo = _run([str(venv / "bin" / "gradtui"), "--headless", "-c", "continue"], elsewhere, 300, env)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "paused before #0 MeanBackward0 (loss)" in demo.stdout, demo.stdout
    assert "pass 0 done · 12/12 nodes ran" in demo.stdout, demo.stdout
    assert demo.stdout.rstrip().endswith("script exited with status 0"), demo.stdout
    assert "Traceback" not in demo.stdout + demo.stderr, demo.stdout + demo.stderr
