"""`gradtui.record.tee`: the UI child agent's streams write through and hand complete lines on."""

from __future__ import annotations

import io
import sys

from gradtui.protocol import events as ev
from gradtui.record.tee import LineTee, TeedStreams


class Pipe(io.StringIO):
    """A stream with the attributes scripts reach for."""

    def fileno(self) -> int:
        return 42

    def isatty(self) -> bool:
        return False


def test_writes_go_through_at_once_and_complete_lines_are_handed_on():
    pipe, seen = Pipe(), []
    tee = LineTee(pipe, "stdout", seen.append)
    assert tee.write("step 0 ") == 7
    assert pipe.getvalue() == "step 0 " and seen == []  # through at once, the line not complete yet
    tee.write("loss 1.5\nstep 1")
    tee.writelines([" loss 0.5\n", "a\nb\n", "progress 10%\r", "progress 20%"])
    tee.flush()
    assert pipe.getvalue() == "step 0 loss 1.5\nstep 1 loss 0.5\na\nb\nprogress 10%\rprogress 20%"
    assert [e.text for e in seen] == ["step 0 loss 1.5\n", "step 1 loss 0.5\n", "a\nb\n"]
    tee.end()
    assert seen[-1] == ev.Output("stdout", "progress 10%\rprogress 20%")
    assert tee.fileno() == 42 and tee.isatty() is False  # the wrapped stream's own


def test_teed_streams_replace_and_restore_sys_streams():
    seen: list[ev.Event] = []
    before = sys.stdout, sys.stderr
    teed = TeedStreams(seen.append)
    try:
        assert isinstance(sys.stdout, LineTee) and isinstance(sys.stderr, LineTee)
        print("to stdout")
        print("to stderr, unfinished", end="", file=sys.stderr)
    finally:
        teed.restore()
    assert (sys.stdout, sys.stderr) == before
    assert seen == [ev.Output("stdout", "to stdout\n"), ev.Output("stderr", "to stderr, unfinished")]
    teed.restore()  # idempotent
    assert (sys.stdout, sys.stderr) == before
