"""A headless replay says what the run said: tests/fixtures/nanmlp.py
recorded with `break nan` hitting at pass 5 (every hooked pass, and `--flight 3`), replayed with
`gradtui replay --headless`: the same pass lines in the same words (node counts, hooked passes
outside the flight window as hooked), the pause in the run's words, commands left after the
end named, and the flow of any pass."""

from __future__ import annotations

import pytest

from gradtui.record.reader import Recording
from tests.helpers import script
from tests.processes import gradtui

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module", params=[(), ("--flight", "3")], ids=["every-pass", "flight-3"])
def made(request, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("nanmlp") / "run.db")
    run = gradtui(
        "--headless", "--record", path, *request.param, "-c", "break nan", "-c", "continue", script("nanmlp.py")
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return path, run.stdout


def _pass_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("pass ")]


def test_the_replay_tells_every_pass_as_the_run_did(made):
    path, live = made
    done = gradtui("replay", path, "--headless")
    assert done.returncode == 0, done.stderr[-2000:]
    told = _pass_lines(done.stdout)
    assert told[: len(_pass_lines(live))] == _pass_lines(live)
    assert told[-1] == "pass 5 · loss.backward() at nanmlp.py:22 · loss nan · 16 nodes"  # where it pauses
    [paused_live] = [line for line in live.splitlines() if line.startswith("paused after")]
    [paused] = [line for line in done.stdout.splitlines() if line.startswith("paused after")]
    assert paused.endswith(": " + paused_live.split(" · ")[-1])  # "breakpoint 1: #0 ... made a non-finite gradient"


def test_commands_left_after_the_end_are_named_not_dropped(made):
    path, _ = made
    done = gradtui("replay", path, "--headless", "-c", "continue", "-c", "print", "-c", "flow")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "(gradtui) -- the run has ended: not run: print; flow"


def test_flow_n_answers_for_any_recorded_pass(made):
    path, _ = made
    with Recording(path) as recording:
        bare = next(p.index for p in recording.passes() if not p.per_node)
        names = [f.name for f in recording.flow(bare)]
    done = gradtui("replay", path, "--headless", "-c", f"pass {bare}", "-c", f"flow {bare}")
    lines = done.stdout.splitlines()
    refused = lines[lines.index(f"(gradtui) pass {bare}") + 1]
    assert refused.startswith(f"  error: pass {bare} has no per-node data") and f"flow {bare}" in refused
    answer = lines[lines.index(f"(gradtui) flow {bare}") + 1 :]
    assert answer[0] == f"  gradient flow after pass {bare}:"
    assert [line.split()[0] for line in answer[2 : 2 + len(names)]] == names
