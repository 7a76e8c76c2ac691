"""The compiled sketch of an earlier commit, built beside this one: sketch versions timed in one process.

    earlier_sketch.load("main")  # the compiled posthooks as commit `main` has them, or None

A sketch version's cost is only comparable with another's when both run in one process, in
alternating rounds, on the same load (the project's machine is shared). The compiled posthooks of
an earlier commit (its posthooks.cpp and the parts it includes, read with `git show REV:PATH`)
are built into a private temporary folder under another module name (its init function renamed by
a define), so this commit's library and that one load side by side; `mechanism` makes a
fingerprint with its `sketch`, as that commit's runs made them (a value it declines, and a small
one kept whole, by this commit's code). About 20 s to build on 2 cores; None where git, the
compiler or the build fails (the reason is printed). `load_python(rev)` loads that commit's
gradtui/engine/fingerprints/sketch.py under another name the same way: its Python sketch, as a
process without the compiled library made it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch

from gradtui.engine.fingerprints import sketch as sk
from gradtui.engine.hooks import native

REPO = Path(__file__).resolve().parent.parent
NAME = "gradtui_posthooks_earlier"


def load(rev: str) -> ModuleType | None:
    """Commit `rev`'s compiled posthooks, built and loaded as NAME, or None (why is printed)."""
    folder = Path(tempfile.mkdtemp(prefix="gradtui-earlier-"))
    try:
        for part in native.SOURCES:
            path = part.relative_to(REPO).as_posix()
            shown = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=REPO, capture_output=True, check=False)
            if shown.returncode == 0:
                (folder / part.name).write_bytes(shown.stdout)
        output = folder / f"{NAME}.so"
        command = native.compile_command(output)
        if command is None:
            print("earlier sketch not built: no compiler")
            return None
        command = [str(folder / native.SOURCE.name) if c == str(native.SOURCE) else c for c in command]
        command.append(f"-DPyInit_gradtui_posthooks=PyInit_{NAME}")
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
        if done.returncode != 0:
            print(f"earlier sketch not built: {done.stderr.strip().splitlines()[-1:]}")
            return None
        spec = importlib.util.spec_from_file_location(NAME, output)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    except (OSError, subprocess.SubprocessError, ImportError) as exc:
        print(f"earlier sketch not built: {type(exc).__name__}: {exc}")
        return None


def load_python(rev: str) -> ModuleType | None:
    """Commit `rev`'s gradtui/engine/fingerprints/sketch.py, loaded as NAME + "_python", or None."""
    shown = subprocess.run(
        ["git", "show", f"{rev}:gradtui/engine/fingerprints/sketch.py"], cwd=REPO, capture_output=True, check=False
    )
    if shown.returncode != 0:
        print(f"earlier Python sketch not loaded: {shown.stderr.decode(errors='replace').strip()}")
        return None
    path = Path(tempfile.mkdtemp(prefix="gradtui-earlier-")) / "sketch.py"
    path.write_bytes(shown.stdout)
    spec = importlib.util.spec_from_file_location(f"{NAME}_python", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def python_mechanism(module: ModuleType) -> Callable[[torch.Tensor], sk.Row]:
    """A fingerprint made by the earlier commit's Python sketch (`python_fingerprint`), in this
    commit's Row."""

    def fingerprint(t: torch.Tensor) -> sk.Row:
        row = module.python_fingerprint(t)
        return sk.Row(row.norm, row.body, row.exact)

    return fingerprint


def mechanism(module: ModuleType) -> Callable[[torch.Tensor], sk.Row]:
    """A fingerprint made by `module.sketch` (the earlier commit's compiled sketch) where it takes
    the value, else by this commit's code."""

    def fingerprint(t: torch.Tensor) -> sk.Row:
        if t.numel() > sk.EXACT_LIMIT:
            made = module.sketch(t, sk.grid_parts)
            if made is not None:
                return sk.Row(made[1], made[0], False)
        return sk.python_fingerprint(t)

    return fingerprint
