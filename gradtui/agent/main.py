"""The agent: the user's script on its process's main thread, its session served to clients.

Three ways in, one `run_agent`:
- a child agent (`gradtui script.py`): the UI parent started `python -m gradtui.agent` with one
  end of a socketpair and the child's stdout/stderr as pipes it reads itself; the agent quits
  when that connection goes (the UI is gone, whatever killed it); with `--record`, the lines
  written through `sys.stdout`/`sys.stderr` reach the recording too (`gradtui.record.tee`);
- `gradtui --listen [HOST:]PORT script.py` (`listen_main`): a TCP listener on loopback unless
  told otherwise, a token, a runtime file for `gradtui attach`; fds 1/2 teed into Output events;
- `gradtui.listen()` in the user's own process (`gradtui.agent.listen`).
"""

from __future__ import annotations

import ctypes
import os
import secrets
import signal
import socket
import sys
import threading
from typing import TYPE_CHECKING, Any

from gradtui.agent.build import Transport, build_agent, process_info
from gradtui.agent.forks import ForkGuard
from gradtui.agent.output import FdTee
from gradtui.agent.outputs import OUTPUT_FAILED, OutputError, Outputs
from gradtui.agent.server import AgentServer
from gradtui.protocol.options import RunOptions
from gradtui.wire.runtime import AgentEntry, parse_address, remove_entry, write_entry

if TYPE_CHECKING:  # the session imports the engine; only its type is needed here
    from gradtui.engine.session import Session

TOKEN_FD_ENV = "GRADTUI_TOKEN_FD"
"""A child agent reads its token from this inherited fd (not the environment: /proc/PID/environ)."""
FD_ENV = "GRADTUI_AGENT_FD"

ATTACH_TIMEOUT = 30.0
"""Seconds a child agent waits for its UI to complete the hello before giving up."""


def run_agent(
    options: RunOptions,
    token: str,
    *,
    conn: socket.socket | None = None,
    listener: socket.socket | None = None,
    exit_with_client: bool = False,
    tee: bool = False,
    entry: str | None = None,
) -> int:
    """Run the script under a session served over `conn` / `listener`; return its exit status.

    `entry`: the runtime file of a --listen agent, removed however the run ends (a SIGTERM or
    SIGHUP too, see gradtui.engine.process.exits). After an unhandled KeyboardInterrupt the process is
    set to die of SIGINT at exit, as python's would. A signal after the script's end waits for
    the last words (report, recording, runtime file, goodbye): a SIGTERM / SIGHUP then kills the
    process, a Ctrl-C is ignored, as python ignores one in its atexit functions."""
    from gradtui.engine.capture.graph import allow_deep_graphs
    from gradtui.engine.process.exits import IGNORED_INTERRUPT, FatalSignals, describe_signal
    from gradtui.engine.process.runner import ScriptRunner, exit_now

    def stop() -> None:  # session.quit(), then the script interrupted if it is busy outside a pause
        threading.Thread(target=runner.stop, name="gradtui-stop", daemon=True).start()

    transport = Transport(token, listener, exit_with_client, process_info(options, "agent"))
    try:
        agent = build_agent(options, transport, stop)
    except OutputError as exc:
        print(f"gradtui: {exc}", file=sys.stderr)
        return OUTPUT_FAILED
    session, server, outputs = agent.session, agent.server, agent.outputs
    assert server is not None

    def hard_exit(status: int) -> None:  # the script went on after quit (runner's watchdog)
        _end(server, outputs, "quit")
        exit_now(status)

    runner = ScriptRunner(
        options.script, options.args, session, capture_output=False, hard_exit=hard_exit, module=options.module
    )
    forks = ForkGuard(session, server)
    forks.install()
    server.start()
    if conn is not None and not _ui_connected(server, conn):
        return 2
    fds, lines = _capture(tee, session, outputs)
    allow_deep_graphs()

    def last_words(signum: int) -> None:  # SIGTERM / SIGHUP: say how the run ended, then die of it
        _stop_capture(entry, fds)
        runner.end_by_signal(signum)
        _end(server, outputs, f"the script's process {describe_signal(signum)}")

    fatal = FatalSignals(last_words)
    fatal.install()
    status = 1
    try:
        status = runner.run()
    finally:  # the last words, with a signal deferred until they are said (gradtui.engine.process.deferral)
        if forks.in_child:  # a forked child ran off the script's end: the last words are the parent's
            forks.end_child(status, runner.ending.traceback if runner.ending is not None else None)
        forks.close()
        _stop_capture(entry, fds, lines)
        if tee and runner.ending is not None and runner.ending.traceback:
            _print_traceback(runner.ending.traceback)
        failures = _end(server, outputs, "the script ended")
        if fatal.restore() is not None and conn is None:  # a child's fd 2 is the script's stderr in its UI
            print(IGNORED_INTERRUPT, file=sys.stderr)
    return _exit_status(status, failures, runner.exit_signal)


def _stop_capture(entry: str | None, fds: FdTee | None, lines: Any = None) -> None:
    """The run is ending: its runtime file removed, the script's output no longer captured."""
    if entry is not None:
        remove_entry(entry)
    if fds is not None:
        fds.stop()
    if lines is not None:
        lines.restore()


def _print_traceback(text: str) -> None:
    """The script's traceback on the agent's own stderr, as python prints it, whether or not a
    client is attached (one that is gets it in the script's end as well). Written after the
    capture of fd 2 stopped: it is not sent twice to a client as the script's output."""
    try:
        sys.stderr.write(text if text.endswith("\n") else text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _exit_status(status: int, failures: list[str], exit_signal: int | None) -> int:
    """The agent's exit status: the script's (OUTPUT_FAILED if it succeeded but the outputs
    failed); set to die of `exit_signal` at exit (python's way), and a finished torchrun rank to
    end at exit, not in gloo's teardown (gradtui.engine.process.exits)."""
    from gradtui.distributed.job import in_job_env
    from gradtui.engine.process.exits import die_at_exit, end_at_exit

    die_at_exit(exit_signal)
    status = OUTPUT_FAILED if failures and status == 0 else status
    if in_job_env():
        end_at_exit(status)
    return status


def _ui_connected(server: AgentServer, conn: socket.socket) -> bool:
    """Serve a child agent's one connection; has its UI completed the hello in time?"""
    server.serve_connection(conn)
    if server.attached.wait(ATTACH_TIMEOUT):
        return True
    print("gradtui agent: the UI did not connect; not running the script", file=sys.stderr)
    server.close("no client")
    return False


def _capture(tee: bool, session: Session, outputs: Outputs) -> tuple[FdTee | None, Any]:
    """Start capturing the script's output: fds 1/2 teed into Output events (--listen), or, for a
    child agent whose UI reads its pipes, the lines written through sys.stdout/stderr teed into
    the recording (if there is one)."""
    if tee:
        fds = FdTee(session.emit)
        fds.start()
        return fds, None
    if outputs.recorder is None:
        return None, None
    from gradtui.record.tee import TeedStreams

    return None, TeedStreams(outputs.recorder)


def _follower() -> bool:
    from gradtui.distributed.tap import is_follower

    return is_follower()


def _end(server: AgentServer, outputs: Outputs, reason: str) -> list[str]:
    """Finish the report and recording, say goodbye to the client; what failed to be written."""
    failures = outputs.close()
    for line in failures:
        print(line, file=sys.stderr)
    server.close(reason)
    return failures


def _die_with_parent() -> None:
    """Linux: get SIGKILL when the parent (the UI) dies, however it dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _read_token(fd: int) -> str:
    """The token the UI parent wrote to the pipe at `fd` (read to its end, then closed)."""
    chunks = []
    try:
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode()


def child_main() -> int:
    """`python -m gradtui.agent`: the agent a UI parent started (see module doc)."""
    options = RunOptions.from_env()
    token = _read_token(int(os.environ.pop(TOKEN_FD_ENV)))
    conn = socket.socket(fileno=int(os.environ.pop(FD_ENV)))
    _die_with_parent()
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.getcwd():
        del sys.path[0]  # `-m` put the cwd first; `python script.py` would not have it
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # a TextIOWrapper: a pipe, read live by the UI, as a terminal would be
    from gradtui.engine.process import exits

    exits.arm()  # before torch is imported: the process ends last of all as python's would
    status = run_agent(options, token, conn=conn, exit_with_client=True)
    from gradtui.engine.process.runner import exit_now
    from gradtui.protocol.events import QUIT_STATUS

    if status == QUIT_STATUS and exits.pending() is None:  # the user asked to stop: the script's
        exit_now(status)  # atexit work is not wanted (a KeyboardInterrupt's 130 runs it, as python)
    return status


def is_loopback(host: str) -> bool:
    """Does `host` name a loopback address only?"""
    return host in ("localhost", "::1") or host.startswith("127.")


def open_listener(address: str) -> socket.socket:
    """A listening TCP socket for `address` (OSError says why not, ValueError for a bad address)."""
    host, port = parse_address(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=4)


def listen_main(options: RunOptions) -> int:
    """`gradtui --listen ADDRESS script.py`: serve the script's session to attaching clients."""
    assert options.listen is not None
    try:
        listener = open_listener(options.listen)
    except ValueError as exc:
        print(f"gradtui: --listen {options.listen}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(
            f"gradtui: cannot listen on {options.listen}: {exc.strerror or exc} "
            "(is another agent on that port? :0 picks a free one)",
            file=sys.stderr,
        )
        return 2
    host, port = listener.getsockname()[:2]
    if not is_loopback(host):
        print(
            f"gradtui: warning: listening on {host}, not loopback: anyone who can reach this machine "
            "and has the token can run code in the script's process",
            file=sys.stderr,
        )
    token = secrets.token_urlsafe(24)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    path = None if _follower() else write_entry(AgentEntry(address, token, os.getpid(), options.script))
    print(
        f"gradtui: agent listening on {address} (pid {os.getpid()}); attach with: gradtui attach {address}",
        file=sys.stderr,
        flush=True,
    )
    try:
        return run_agent(options, token, listener=listener, tee=True, entry=path)
    finally:
        if path is not None:
            remove_entry(path)
