"""`gradtui -m MODULE ARGS` runs a module as `python -m MODULE ARGS` (and `pdb -m`) does:
`__package__` and `__spec__` set, so relative imports work, sys.argv[0] its file, the working
folder first on sys.path. The oracle is python itself: tests/fixtures/pkg/train.py, whose
relative import works only as a module, prints what it was given, and gradtui's run must print
the same lines, headless and under --listen with a client attached."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import REPO
from tests.processes import PROCESS_TIMEOUT, Listening

pytestmark = pytest.mark.timeout(180)

FIXTURES = REPO / "tests" / "fixtures"
ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=FIXTURES,
        env=ENV,
        timeout=PROCESS_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )


def _python_m() -> list[str]:
    plain = _run("-m", "pkg.train", "3", "--flag")
    assert plain.returncode == 0, plain.stderr
    lines = plain.stdout.splitlines()
    assert "package pkg spec pkg.train name __main__" in lines and "path0 True" in lines
    return lines


def _in_order(expected: list[str], got: list[str]) -> bool:
    """Are `expected`'s lines all in `got`, in the same order (gradtui's own lines between them)?"""
    rest = iter(got)
    return all(any(line == seen for seen in rest) for line in expected)


@pytest.mark.parametrize("spelling", [["-m", "pkg.train"], ["-mpkg.train"]])
def test_headless_dash_m_prints_what_python_dash_m_prints(spelling):
    expected = _python_m()
    done = _run("-m", "gradtui", "--headless", "-c", "continue", *spelling, "3", "--flag")
    assert done.returncode == 0, done.stderr
    got = done.stdout.splitlines()
    assert _in_order(expected, got), (expected, done.stdout)
    assert "paused before #0 SumBackward0 · pass 0 · 0/4 done · step" in got  # debugged, not only run
    assert "at model.py:10: return (x * SCALE).pow(2).sum()" in [line.strip() for line in got]


def test_a_missing_module_fails_as_python_says():
    plain = _run("-m", "pkg.nosuch")
    done = _run("-m", "gradtui", "--headless", "-m", "pkg.nosuch")
    assert plain.returncode == done.returncode == 1
    assert "No module named pkg.nosuch" in plain.stderr and "No module named pkg.nosuch" in done.stderr


def test_dash_m_needs_a_name():
    done = _run("-m", "gradtui", "--headless", "-m")
    assert done.returncode == 2 and "gradtui: -m needs a module name" in done.stderr


def test_listen_dash_m_with_a_client_attached(tmp_path):
    """Under --listen the script's stdout is the agent's own: exactly python's lines."""
    expected = _python_m()
    agent = Listening(
        "-m", tmp_path, "127.0.0.1:0", "pkg.train", "3", "--flag", env={"PYTHONPATH": ENV["PYTHONPATH"]}, cwd=FIXTURES
    )
    try:
        address = agent.wait_listening()
        client = agent.attach(address, "--headless", "-c", "continue")
        assert client.returncode == 0, client.stderr
        assert "paused before #0 SumBackward0 · pass 0 · 0/4 done · step" in client.stdout, client.stdout
        assert agent.wait(PROCESS_TIMEOUT) == 0
        out, _err = agent.output()
        assert out.decode().splitlines() == expected
    finally:
        agent.close()
