"""Shared fixtures (the helpers they use, and the tests too, are tests/helpers.py).

Every wait has a timeout, so a deadlock fails the test instead of hanging it.
"""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

from tests.helpers import SCRIPTS, Chain, Driven


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
    """The `stash` module the test scripts put objects in (tests/scripts/stash.py), emptied."""
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
    z = y ** 2
    return Chain(x, y, z, {"x": x, "y": y, "z": z})
