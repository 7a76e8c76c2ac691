"""Warnings name the user's line, as in a plain run, and gradtui adds none."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO, script

pytestmark = pytest.mark.timeout(120)

WARNING = re.compile(r"^(\S+:\d+): (\w+Warning): (.{0,60})")


def warnings_of(*command: str) -> tuple[list[tuple[str, ...]], str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=100, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    found = [m.groups() for line in done.stderr.splitlines() if (m := WARNING.match(line))]
    return [w for w in found if "NumPy" not in w[2]], done.stdout  # this machine's torch has no numpy


def test_warnings_are_the_plain_runs_at_the_users_lines():
    plain, plain_out = warnings_of(script("warns.py"))
    ours, out = warnings_of("-m", "gradtui", "--headless", "-c", "continue", script("warns.py"))
    assert [w[0] for w in plain] == [f"{script('warns.py')}:{n}" for n in (8, 9, 11)]  # once per line
    assert ours == plain
    assert "grad" in out and plain_out.splitlines()[-1] in out
