"""Command feeding is linear: a 20,000-line -x file is answered command by command, each taken
from the queue without shifting the ones after it (a list's pop(0) moved every later command:
200,000 lines answered 63,000 in 150 s). Counts, not timings (benchmarks/bench_feed.py measures)."""

from __future__ import annotations

import pytest

from gradtui.clients import feeder as feeder_module
from gradtui.protocol import events as ev
from tests.helpers import example, run_headless

pytestmark = pytest.mark.timeout(120)

COUNT = 20_000


class ShiftCountingList(list):
    """A list that counts the elements a `pop(i)` shifts (those after i): what makes pop(0) O(n)."""

    shifted = 0

    def pop(self, index: int = -1):  # type: ignore[override]
        position = index if index >= 0 else len(self) + index
        ShiftCountingList.shifted += len(self) - 1 - position
        return super().pop(index)


def test_twenty_thousand_commands_are_all_answered_in_order():
    commands = [f"print {i}" for i in range(COUNT)]
    run = run_headless(example("chain.py"), commands)
    assert run.status == 0
    answers = [e.text for e in run.of(ev.CommandResult)]
    assert answers == [str(i) for i in range(COUNT)]
    assert len(run.pauses) == 1  # every one answered at the first pause, then no more commands


def test_taking_a_command_shifts_none_of_the_others(monkeypatch):
    ShiftCountingList.shifted = 0
    monkeypatch.setattr(feeder_module, "list", ShiftCountingList, raising=False)  # what the feeder would copy into
    feeder = feeder_module.CommandFeeder([f"print {i}" for i in range(COUNT)])
    taken = []
    while (typed := feeder.pop()) is not None:
        taken.append(typed.text)
    assert taken == [f"print {i}" for i in range(COUNT)]
    assert ShiftCountingList.shifted == 0
