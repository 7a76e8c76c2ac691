"""The `gradtui` program's entry point (the console script and `python -m gradtui`).

A Ctrl-C while gradtui's own modules are still importing (the first few tenths of a second)
is one line, and the process ends as python's does after one, killed by SIGINT (a shell sees
130), instead of a traceback through the import machinery. From `gradtui.cli.main.main` on,
gradtui handles it there (gradtui.engine.process.exits).
"""

from __future__ import annotations

import os
import signal
import sys


def main() -> int:
    """Import the command line, then run it."""
    try:
        from gradtui.cli.main import main as run
    except KeyboardInterrupt:
        print("gradtui: interrupted (Ctrl-C)", file=sys.stderr, flush=True)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 128 + signal.SIGINT  # not reached: SIGINT's default action ends the process
    return run()
