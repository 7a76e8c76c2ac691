"""What a run leaves behind: its JSON report and its SQLite recording, opened before the script
runs (a bad path is refused up front) and closed after it, whichever way it ended.

Both are session listeners that write a pass at a time as passes end, so a crash or a signal
loses at most the pass in flight. Headless runs and agents (child, --listen) open them the same
way, through this one class.
"""

from __future__ import annotations

from typing import Any

from gradtui.protocol.options import RunOptions

OUTPUT_FAILED = 2
"""Exit status of a run whose script succeeded but whose report or recording could not be written."""


class OutputError(Exception):
    """A report or recording could not be opened; the message is one line for the user."""


class Outputs:
    """The report and the recording of one run (either may be absent)."""

    def __init__(self, options: RunOptions) -> None:
        from gradtui.protocol.report import JsonStream, Report

        self.options = options
        self.report: Any = None
        self.recorder: Any = None
        errors: tuple[type[Exception], ...] = (OSError,)  # sqlite3's too once a recording is opened
        try:
            if options.report is not None:
                self.report = Report(JsonStream(options.report))
            if options.record is not None:
                import sqlite3  # here: a run with no recording never imports it

                import torch  # the script's process: the torch it runs, told to the recording as a string

                from gradtui.record.store import Recorder

                errors = (OSError, sqlite3.Error)
                self.recorder = Recorder(
                    options.record, every=options.record_every, flight=options.flight, torch_version=torch.__version__
                )
        except errors as exc:
            failed_report = options.report is not None and self.report is None
            which = f"--report {options.report}" if failed_report else f"--record {options.record}"
            if self.report is not None:
                self.report.close()
            raise OutputError(f"cannot write {which}: {getattr(exc, 'strerror', None) or exc}") from None

    @property
    def listeners(self) -> list[Any]:
        """The session listeners that write them."""
        return [x for x in (self.report, self.recorder) if x is not None]

    def close(self) -> list[str]:
        """Finish writing; one line per output that failed (empty when all is written)."""
        failures = []
        if self.report is not None and (why := self.report.close()):
            failures.append(f"gradtui: could not write the report {self.options.report}: {why}")
        if self.recorder is not None:
            self.recorder.close()
            if self.recorder.failed:
                failures.append(f"gradtui: the recording {self.options.record} stopped: {self.recorder.failed}")
        self.report = self.recorder = None
        return failures
