"""Shared fixtures, and nothing else: the helpers they use, and the tests too, are tests/helpers.py
(in the test's process) and tests/processes.py (whole processes).

Every wait has a timeout, so a deadlock fails the test instead of hanging it.
"""

from __future__ import annotations

import importlib
import os
import sys

# NOTE: the suite runs on several workers (pyproject's addopts), and most tests start processes
# that import torch too; each would size its thread pool to every core, so a 2-core machine ran
# a dozen pools at once and torch's threads waited on each other (a hundred OpInfo ops took over
# 120 s in a loaded run, 10 s alone). One thread a process, set before torch is imported here and
# inherited by every process a test starts; comparisons are within one process or between
# processes under the same setting, so what they assert does not change. A caller's own value wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.helpers import SCRIPTS, Chain, Driven


def pytest_configure(config):
    """Build gradtui's compiled posthooks once, in the controller, before any worker or script
    starts (gradtui.engine.hooks.native), and let no test process start a build of its own: they all
    use what this built (`GRADTUI_NATIVE=use`), or the Python hooks where it could not be."""
    if hasattr(config, "workerinput"):
        return
    from gradtui.engine.hooks import native

    if native.mode() is native.Mode.OFF:  # any spelling of off (0, false, no, ...)
        return

    if not native.library_path().exists():
        built = native.build()
        if built.module is None:
            print(f"gradtui: compiled posthooks not built ({built.reason}): the Python hooks run", file=sys.stderr)
    os.environ["GRADTUI_NATIVE"] = "use"


@pytest.fixture(autouse=True)
def private_runtime_dir(tmp_path_factory, monkeypatch):
    """Each test's agents write their runtime files to a folder of their own: a test never sees
    the agents of a test running beside it (pytest-xdist), nor the user's own."""
    folder = tmp_path_factory.mktemp("runtime")
    folder.chmod(0o700)
    monkeypatch.setenv("GRADTUI_RUNTIME_DIR", str(folder))


@pytest.fixture
def driven():
    """Factory of Driven runs; every one still running at the end of the test is stopped."""
    runs: list[Driven] = []

    def make(path: str, args: list[str] | tuple[str, ...] = ()) -> Driven:
        run = Driven(path, args)
        runs.append(run)
        return run.start()

    yield make
    for run in runs:
        run.stop()


@pytest.fixture
def stash():
    """The `stash` module the test scripts put objects in (tests/fixtures/stash.py), emptied."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        module = importlib.import_module("stash")
    finally:
        sys.path.remove(str(SCRIPTS))
    module.items.clear()
    yield module.items
    module.items.clear()


@pytest.fixture
def chain() -> Chain:
    x = torch.tensor([2.0], requires_grad=True)
    y = x * 3
    z = y**2
    return Chain(x, y, z, {"x": x, "y": y, "z": z})
