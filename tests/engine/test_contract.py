"""The contract clients program against: every CommandResult carries the
request id its command was submitted with, and breakpoint state arrives as BreakpointsChanged
events (after `break`, `delete` and every hit), so no client reads the Session."""

from __future__ import annotations

import pytest

from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import parse_spec
from gradtui.protocol.commands import parse
from tests.helpers import example, run_headless, script

pytestmark = pytest.mark.timeout(60)


def test_every_answer_carries_its_request_id(driven):
    run = driven(example("chain.py"))
    run.next(ev.Paused)
    session = run.session
    session.submit(parse("print"), request=1)
    assert run.result().request == 1
    # (a line that does not parse never reaches the session: its client answers it, see
    # tests/wire/test_parse_once.py)
    session.submit(parse("print"))  # no request: None
    assert run.result().request is None
    session.submit(parse("break nan"), request=4)
    result = run.result()
    assert (result.ok, result.request, result.text) == (True, 4, "breakpoint 1 at nan")
    session.submit(parse("delete 7"), request=5)  # refused by the command itself
    refused = run.result()
    assert (refused.ok, refused.request) == (False, 5)
    session.submit(parse("continue"), request=6)
    finished = run.join()
    assert finished.exit_status == 0
    session.submit(parse("print"), request=7)  # not paused any more: refused, still answered for 7
    assert [(r.ok, r.request) for r in run.queue.queue if isinstance(r, ev.CommandResult)] == [(False, 7)]


def test_a_command_dropped_because_the_engine_moved_on_carries_its_request(driven):
    run = driven(example("chain.py"))
    run.next(ev.Paused)
    run.session.submit(parse("step"), request=10)
    run.session.submit(parse("scale 2"), request=11)  # typed at the first pause, read at the second
    run.next(ev.Paused)
    dropped = run.result()
    assert (dropped.ok, dropped.request) == (False, 11) and dropped.text.startswith("not applied")
    run.session.submit(parse("continue"))
    run.join()


def test_breakpoints_changed_after_break_delete_and_every_hit():
    run = run_headless(
        script("loop.py"), ["break MulBackward0", "break nan", "continue", "continue", "delete 1", "continue"], ["3"]
    )
    assert run.status == 0, run.output
    changes = [tuple((b.number, b.spec.text, b.hits) for b in e.breakpoints) for e in run.of(ev.BreakpointsChanged)]
    hits = len(run.of(ev.BreakpointHit))
    assert hits >= 2
    assert changes[0] == ((1, "MulBackward0", 0),)
    assert changes[1] == ((1, "MulBackward0", 0), (2, "nan", 0))
    assert changes[2] == ((1, "MulBackward0", 1), (2, "nan", 0))  # the first hit
    assert changes[3] == ((1, "MulBackward0", 2), (2, "nan", 0))  # the second
    assert changes[4] == ((2, "nan", 0),)  # delete 1
    assert len(changes) == 3 + hits  # break, break, delete, and one per hit
    assert run.session.breakpoint_state() == run.of(ev.BreakpointsChanged)[-1]  # for a late client
    # Each hit's change comes right after its BreakpointHit.
    for i, e in enumerate(run.events):
        if isinstance(e, ev.BreakpointHit):
            assert isinstance(run.events[i + 1], ev.BreakpointsChanged)


def test_a_refused_break_or_delete_changes_nothing_and_says_nothing_of_breakpoints(driven):
    run = driven(example("chain.py"))
    run.next(ev.Paused)
    for command in ("break pass x", "delete 3"):
        run.submit(command)
        assert not run.result().ok
    run.submit("continue")
    run.join()
    assert [e for e in run.events if isinstance(e, ev.BreakpointsChanged)] == []


def test_run_on_resumes_a_pause_and_runs_to_the_end(driven):
    run = driven(script("loop.py"), ["3"])
    run.next(ev.Paused)
    run.session.run_on()
    assert run.next(ev.Resumed).mode == "continue"
    finished = run.join()
    assert finished.exit_status == 0
    assert len([e for e in run.events if isinstance(e, ev.Paused)]) == 1  # no pause after it


def test_the_answer_to_break_comes_before_the_breakpoints_it_changed(driven):
    run = driven(example("chain.py"))
    run.next(ev.Paused)
    run.submit("break nan")
    answer = run.next(ev.CommandResult)
    changed = run.next(ev.BreakpointsChanged)
    assert run.events.index(answer) < run.events.index(changed)
    assert changed.breakpoints == (ev.BreakpointInfo(1, parse_spec("nan"), 0),)
    run.submit("continue")
    run.join()
