"""Signals landing inside gradtui's own writes (gradtui.engine.process.deferral), in-process: a signal
raised inside a fan-out is acted on once the outermost one has ended, by the handler then in
place; a listener that may hold the script lets signals through at once; a script's own SIGINT
handler keeps the signal. SIGUSR1 stands for SIGTERM / SIGHUP (its handler
asks the deferral first, as FatalSignals' does) so that no test can end the test process."""

from __future__ import annotations

import signal
import threading

import pytest

from gradtui.engine.listeners import Listeners
from gradtui.engine.process.deferral import DEFERRAL, Deferral
from gradtui.protocol import events as ev

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def python_sigint():
    """SIGINT at python's own handler for the test (put back as it was after)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def fatal():
    """A Deferral, and a SIGUSR1 handler that asks it first; `seen` says what the handler did."""
    deferral, seen = Deferral(), []

    def handler(signum: int, _frame: object) -> None:
        seen.append("noted" if deferral.defers(signum) else f"acted at depth {deferral.depth}")

    previous = signal.signal(signal.SIGUSR1, handler)
    yield deferral, seen
    deferral.arm(False)
    signal.signal(signal.SIGUSR1, previous)


def test_a_fatal_signal_in_nested_writes_is_acted_on_once_the_outermost_ends(fatal):
    deferral, seen = fatal

    def inner(_event: object) -> None:
        signal.raise_signal(signal.SIGUSR1)
        seen.append("inner written")

    def outer(_event: object) -> None:
        deferral.inside(inner, None)
        seen.append("outer written")

    deferral.inside(outer, None)
    assert seen == ["noted", "inner written", "outer written", "acted at depth 0"]
    assert deferral.pending is None


def test_a_write_that_outlives_the_deadline_does_not_keep_a_fatal_signal_waiting():
    ended, write_may_end = [], threading.Event()

    def overdue(signum: int) -> None:  # stands for ending the process
        ended.append(signum)
        write_may_end.set()

    deferral = Deferral(deadline=0.1, overdue=overdue)
    previous = signal.signal(signal.SIGUSR1, lambda signum, _frame: deferral.defers(signum))
    try:
        deferral.inside(lambda _e: (signal.raise_signal(signal.SIGUSR1), write_may_end.wait(30)), None)
    finally:
        deferral.arm(False)
        signal.signal(signal.SIGUSR1, previous)
    assert ended == [signal.SIGUSR1]


def test_sigint_in_a_write_raises_keyboard_interrupt_after_it(python_sigint):
    deferral, written = Deferral(), []

    def write(_event: object) -> None:
        signal.raise_signal(signal.SIGINT)
        written.append(True)

    with pytest.raises(KeyboardInterrupt):
        deferral.inside(write, None)
    assert written == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    deferral.inside(lambda _e: None, None)  # nothing noted is left behind
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigint_in_nested_fan_outs_waits_for_the_outermost(python_sigint):
    deferral, written = Deferral(), []

    def inner(_event: object) -> None:
        signal.raise_signal(signal.SIGINT)
        written.append("inner")

    def outer(_event: object) -> None:
        deferral.inside(inner, None)
        assert signal.getsignal(signal.SIGINT) != signal.default_int_handler  # still noting
        written.append("outer")

    with pytest.raises(KeyboardInterrupt):
        deferral.inside(outer, None)
    assert written == ["inner", "outer"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_scripts_own_sigint_handler_keeps_the_signal_inside_a_write():
    calls = []

    def own(_signum: int, _frame: object) -> None:
        calls.append("handler")

    previous = signal.signal(signal.SIGINT, own)
    try:
        Deferral().inside(lambda _e: (signal.raise_signal(signal.SIGINT), calls.append("written")), None)
        assert signal.getsignal(signal.SIGINT) is own
    finally:
        signal.signal(signal.SIGINT, previous)
    assert calls == ["handler", "written"]


@pytest.fixture
def armed():
    """This process's deferral armed for the test (as FatalSignals.install arms it)."""
    DEFERRAL.arm(True)
    yield
    DEFERRAL.arm(False)


FINISHED = ev.PassFinished(0, 3, 3, None, None)
"""The end of a pass: what the report and the recording write."""


def test_a_session_fan_out_finishes_every_listener_before_sigint_acts(python_sigint, armed):
    listeners, heard = Listeners(), []
    listeners.add(lambda event: (heard.append("first"), signal.raise_signal(signal.SIGINT)))
    listeners.add(lambda event: heard.append("second"))
    with pytest.raises(KeyboardInterrupt):
        listeners.emit(FINISHED)
    assert heard == ["first", "second"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_printed_lines_fan_out_finishes_before_sigint_acts(python_sigint, armed):
    listeners, heard = Listeners(), []
    listeners.add(lambda event: (heard.append("first"), signal.raise_signal(signal.SIGINT)))
    listeners.add(lambda event: heard.append("second"))
    with pytest.raises(KeyboardInterrupt):
        listeners.emit(ev.Output("stdout", "x\n"))
    assert heard == ["first", "second"]


def test_a_listener_that_holds_the_script_lets_sigint_through_at_once(python_sigint, armed):
    listeners, heard = Listeners(), []
    listeners.add(lambda event: (signal.raise_signal(signal.SIGINT), heard.append("held on")), holds=True)
    listeners.add(lambda event: heard.append("second"))
    with pytest.raises(KeyboardInterrupt):
        listeners.emit(FINISHED)
    assert heard == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_sigint_after_the_scripts_end_is_dropped_once_the_last_words_are_said(python_sigint):
    deferral, written = Deferral(), []
    deferral.arm(True)
    try:
        deferral.script_over()
        signal.raise_signal(signal.SIGINT)  # in gradtui's last words: noted, nothing raised
        deferral.inside(lambda _e: written.append("the run's end"), None)  # a fan-out does not act on it
        deferral.lifted(lambda _e: written.append("not lifted now"), None)  # nor a listener that holds
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        assert deferral.settle() == signal.SIGINT  # the owner says it was ignored
    finally:
        deferral.arm(False)
    assert written == ["the run's end", "not lifted now"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert deferral.settle() is None  # once


def test_a_run_no_entry_point_owns_is_never_over(python_sigint):
    deferral = Deferral()  # not armed: a library run, a test's in-process session
    deferral.script_over()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    assert deferral.settle() is None


def test_a_listener_that_holds_called_off_the_main_thread_leaves_the_main_threads_deferral_alone(fatal):
    deferral, seen = fatal
    deferral.arm(True)
    entered, go = threading.Event(), threading.Event()

    def held(_event: object) -> None:  # a reader thread's Output, through a listener that holds
        entered.set()
        go.wait(30)

    def write(_event: object) -> None:  # the main thread's write, while that listener runs
        reader = threading.Thread(target=deferral.lifted, args=(held, None))
        reader.start()
        assert entered.wait(30)
        signal.raise_signal(signal.SIGUSR1)
        go.set()
        reader.join(30)
        seen.append("written")

    deferral.inside(write, None)
    assert seen == ["noted", "written", "acted at depth 0"]
    assert deferral.depth == 0
