"""The desync guard tells gradtui's own frames by their package folder, not by a path's words."""

from __future__ import annotations

import os

from gradtui.distributed import guard


def test_torch_and_the_script_under_a_path_that_says_gradtui_are_not_gradtuis_own():
    """A clone at .../gradtui with its venv inside holds torch's files under a path containing
    "gradtui": the guard took torch.distributed's barrier there for gradtui's frame and never
    named the stuck collective (the job's desync test hung from such a clone)."""
    clone = os.path.join(os.sep, "no-such-root", "ci-gradtui", "gradtui")  # never this checkout's own path
    torch_file = os.path.join(
        clone, ".venv", "lib", "python3.11", "site-packages", "torch", "distributed", "distributed_c10d.py"
    )
    script = os.path.join(clone, "tests", "fixtures", "distributed", "ddp_branch.py")
    assert not guard._ours(torch_file) and not guard._ours(script)
    assert guard._ours(guard.__file__)
