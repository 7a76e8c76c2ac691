"""One answer to "is this user code?": provenance, the runner's traceback
trimming and the UI's traceback folding all ask gradtui.protocol.places."""

from __future__ import annotations

import os

import networkx
import pytest
import torch

from gradtui.engine import session as session_module
from gradtui.engine.process import runner
from gradtui.engine.provenance import forward as provenance
from gradtui.examples import demo
from gradtui.protocol import places
from gradtui.ui import fmt
from tests.helpers import script

PATHS = {
    "script": (script("chain.py"), None),
    "torch": (torch.autograd.__file__, "torch"),
    "gradtui": (session_module.__file__, "gradtui"),
    "bundled example": (demo.__file__, None),
    "stdlib": (os.__file__, "python"),
    "frozen": ("<frozen runpy>", "python"),
    "typed": ("<stdin>", None),
    "third party": (networkx.__file__, None),
}


@pytest.mark.parametrize("kind", PATHS)
def test_every_check_gives_the_same_answer(kind):
    path, library = PATHS[kind]
    assert places.library_of(path) == library
    user = library is None
    assert places.is_user_file(path) is user
    assert provenance._is_user_file_cached(path) is user  # the check its forward hot path makes
    assert (fmt.library_package(path) is None) is user
    assert runner._is_internal(path) is (library == "gradtui" or path == "<frozen runpy>")
