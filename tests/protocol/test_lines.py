"""The one line splitter (gradtui.protocol.lines) behind every capture of a script's output."""

from __future__ import annotations

import pytest

from gradtui.protocol.events import Output
from gradtui.protocol.lines import LineSplitter

pytestmark = pytest.mark.timeout(30)


def test_complete_lines_come_out_together_and_the_partial_line_at_the_end():
    lines = LineSplitter("stderr")
    assert lines.feed("ab") is None
    assert lines.feed("c\nd\ne") == Output("stderr", "abc\nd\n")  # a burst is one event
    assert lines.feed("\r50%\r100%") is None  # a progress bar's \r stays in its line
    assert lines.end("!") == Output("stderr", "e\r50%\r100%!")  # a decoder's tail joins the last line
    assert lines.end() is None


def test_only_the_two_streams():
    with pytest.raises(ValueError, match="not an output stream"):
        LineSplitter("stdin")
