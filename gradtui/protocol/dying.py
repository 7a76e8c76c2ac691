"""Ending a process of a signal, as python itself ends of one: shared by the engine's exits
(the script's process) and the UI's watchdog (the terminal's), which may import no engine.

Plain Python, no torch and no Textual: `die_now` is the body both layers had written once each.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def signal_status(signum: int) -> int:
    """The exit status a shell reports for a process killed by `signum` (128 + N), as python's."""
    return 128 + signum


def flush_std_streams() -> None:
    """Flush the standard streams, the replaced ones and the real ones, whatever state they are in."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass


def die_now(signum: int) -> None:
    """Flush the standard streams and kill this process with `signum` at its default action, as
    python ends of SIGTERM / SIGHUP (and of SIGINT after a KeyboardInterrupt): a shell sees 128 + N."""
    flush_std_streams()
    signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    os.kill(os.getpid(), signum)
    time.sleep(1.0)  # delivery is asynchronous to another thread at worst; this is the fallback
    os._exit(signal_status(signum))
