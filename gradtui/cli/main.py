"""The `gradtui` command line: the UI, `--headless`, `--listen`, and `gradtui attach`."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import textwrap
from collections.abc import Callable

from gradtui.agent.build import build_agent, path_checks
from gradtui.agent.outputs import OUTPUT_FAILED, OutputError
from gradtui.cli.options import add_client_options, read_commands
from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import KINDS
from gradtui.protocol.commands import COMMANDS
from gradtui.protocol.options import OptionsError, RunOptions

DESCRIPTION = """\
Debug the backward passes of a PyTorch script, unmodified.

gradtui runs SCRIPT as `python SCRIPT ARGS` would. When it calls backward() or
torch.autograd.grad(), gradtui captures the autograd graph and pauses before the
first node, so you can step node by node, see each gradient as it arrives, and
scale, zero, clip or replace it live. Without SCRIPT it runs a bundled demo.
"""


def _table_lines() -> str:
    """The epilog's commands and break specs, from the command table and the breakpoint kinds."""
    commands = " | ".join(c.help_usage() for c in COMMANDS if c.summary or c.usage)
    specs = " | ".join(kind.help_form() for kind in KINDS)
    return "\n".join(
        [
            "commands (for -c, -x and the UI's command bar):",
            *textwrap.wrap(commands, 88, initial_indent="  ", subsequent_indent="  "),
            *textwrap.wrap(f"break specs: {specs}", 88, subsequent_indent="  "),
        ]
    )


EPILOG_REST = """\

also:
  gradtui attach [ADDRESS] [--headless -c CMD ...]   a client to an agent started with --listen
                                                    or gradtui.listen() (gradtui attach --help)
  gradtui replay DB [--headless -c CMD ...]         browse a recording (--record DB), read-only
  gradtui export DB --json PATH                     a recording as the --report JSON
  gradtui diff A.db B.db [--pass N] [--rtol R]     where two recordings part (exit 1 if they differ)
  gradtui serve [ADDRESS] [--port P]                the UI in a browser, a client of a listening agent
                                                    (gradtui serve --help)

examples:
  gradtui train.py --epochs 3
  gradtui -m pkg.train --epochs 3                   as `python -m pkg.train --epochs 3`
  gradtui --listen :0 train.py &   then   gradtui attach
  gradtui --headless -c 'break nan' -c continue --report report.json train.py
  gradtui --headless -c 'break pass 400' -c continue -c 'print' train.py

Passes that nothing can stop in (running on, no breakpoint that could match them) run
unhooked at plain speed, with only their loss and gradient flow recorded; with --report
or --record-all every pass is recorded node by node.

The hooks of a pass in `continue` are compiled C++ where gradtui could build them (once, in
the background, into $GRADTUI_CACHE, else $XDG_CACHE_HOME/gradtui, else ~/.cache/gradtui, a
folder of the user's alone; `python -m gradtui.engine.hooks.native` builds them now);
GRADTUI_NATIVE=off (or 0, false, no) keeps the Python hooks, which give the same numbers,
slower; on (1, true, yes) says why a run does not use them.
"""


def demo_path() -> str:
    """Path of the demo script shipped inside the package."""
    from importlib import resources

    return str(resources.files("gradtui") / "examples" / "demo.py")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used by the tests and for --help)."""
    parser = argparse.ArgumentParser(
        prog="gradtui",
        description=DESCRIPTION,
        epilog=_table_lines() + "\n" + EPILOG_REST,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="show gradtui's version and exit")
    add_client_options(
        parser,
        "a command to run (repeatable, in order; like pdb -c)",
        "no UI: run the commands at the pauses, print each pause and result",
    )
    parser.add_argument(
        "--report", metavar="PATH", help="write a JSON report of every pass to PATH (every pass is then recorded)"
    )
    parser.add_argument(
        "--record-all",
        action="store_true",
        help="record every pass node by node, even one nothing can stop in (by default such "
        "passes run unhooked at plain speed, with only their loss and gradient flow)",
    )
    parser.add_argument(
        "--listen",
        metavar="[HOST:]PORT",
        help="no UI: run the script under an agent that waits at its first pause for a client "
        "(`gradtui attach`); loopback unless HOST says otherwise, :0 picks a free port",
    )
    parser.add_argument(
        "--record",
        metavar="DB",
        help="record the run into a SQLite database: every pass's loss and gradient flow, "
        "and per-node gradient statistics of the passes that were hooked",
    )
    parser.add_argument(
        "--record-every",
        type=_positive,
        metavar="N",
        help="with --record: hook every pass (light statistics) and keep per-node data of every N-th",
    )
    parser.add_argument(
        "--flight",
        type=_positive,
        metavar="K",
        help="with --record: keep the last K passes' per-node statistics in memory and write them "
        "only when a breakpoint hits, the script fails or is quit",
    )
    parser.add_argument(
        "--fingerprints",
        action="store_true",
        help="with --record: also record a fingerprint of every recorded value (gradients, "
        "forward outputs, saved values) for `gradtui diff`; costs ~1.5x a recorded backward",
    )
    parser.add_argument(
        "--against",
        metavar="REF.db",
        help="compare each hooked pass with the same pass of a recording made with --fingerprints: "
        "`break differs>R` stops at the first node that parts from it by more than R",
    )
    parser.add_argument(
        "-m",
        dest="module",
        nargs=argparse.REMAINDER,
        metavar="MODULE [ARGS]",
        help="run a module as `python -m MODULE ARGS` does (`__package__` set, relative imports "
        "work); the rest of the line is its arguments",
    )
    parser.add_argument("script", nargs="?", metavar="SCRIPT", help="the script to run (default: the demo)")
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments for the script")
    return parser


class _Version(argparse.Action):
    """`--version`, its number read only when asked for: the package metadata lookup costs every
    run's start a few milliseconds otherwise."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        _namespace: argparse.Namespace,
        _values: object,
        _option_string: str | None = None,
    ) -> None:
        print(f"gradtui {_version()}")  # on stdout, as argparse's own `version` action prints
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gradtui")
    except PackageNotFoundError:
        return "unknown"


SUBCOMMANDS = ("attach", "replay", "export", "serve", "diff")


INTERRUPTED = {"attach": "; the agent goes on as after a detach"}
"""What a subcommand's Ctrl-C line adds about what it leaves behind."""


def _subcommand(name: str, argv: list[str]) -> int:
    """Run `gradtui NAME ARGV` (each imported only when asked for: none loads the UI or torch early).

    A Ctrl-C that reaches here (`gradtui attach --headless` waiting on the agent, any subcommand
    while it starts) is one line, and the process ends as python's does after one, killed by
    SIGINT (a shell sees 130; gradtui.engine.process.exits); python would print its traceback,
    of gradtui's internals (asyncio's, for attach)."""
    try:
        match name:
            case "attach":
                from gradtui.cli.attach import main
            case "replay":
                from gradtui.cli.replay import main
            case "export":
                from gradtui.cli.export import main
            case "serve":
                from gradtui.cli.serve import main
            case "diff":
                from gradtui.cli.diff import main
            case _:
                raise ValueError(name)
        return main(argv)
    except KeyboardInterrupt:
        from gradtui.engine.process import exits

        print(f"gradtui {name}: interrupted (Ctrl-C){INTERRUPTED.get(name, '')}", file=sys.stderr, flush=True)
        exits.die_at_exit(signal.SIGINT)
        return 128 + signal.SIGINT


def _positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `gradtui` console script; returns the exit status.

    Called as the program (`argv` None: the console script, `python -m gradtui`), the process
    ends as python's would for the script: killed by SIGINT after an unhandled KeyboardInterrupt
    (gradtui.engine.process.exits); called with an argument list (a test, a library) it only returns."""
    if argv is None:
        from gradtui.engine.process import exits

        exits.arm()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in SUBCOMMANDS and not os.path.isfile(argv[0]):  # a script named `attach` still runs
        return _subcommand(argv[0], argv[1:])
    parser = build_parser()
    options = parser.parse_args(argv)
    if options.module is not None:
        if not options.module:
            print("gradtui: -m needs a module name (gradtui -m pkg.train ARGS)", file=sys.stderr)
            return 2
        # everything after `-m NAME` is the module's (argparse gives `-mNAME a b` as NAME, SCRIPT, ARGS)
        script, args = (
            options.module[0],
            [*([options.script] if options.script else []), *options.args, *options.module[1:]],
        )
    else:
        script, args = options.script or demo_path(), list(options.args)
        if not os.path.isfile(script):
            print(f"gradtui: no such script: {script}", file=sys.stderr)
            return 2
    commands = read_commands(options, "gradtui")
    if commands is None:
        return 2
    if (problem := _native_setting_problem()) is not None:
        print(f"gradtui: {problem}", file=sys.stderr)
        return 2
    given = RunOptions(
        script,
        args,
        commands,
        options.report,
        options.record_all,
        headless=options.headless,
        listen=options.listen,
        record=options.record,
        record_every=options.record_every,
        flight=options.flight,
        fingerprints=options.fingerprints,
        against=options.against,
        module=options.module is not None,
    )
    try:
        run = given.validate(path_checks())
    except OptionsError as exc:
        print(f"gradtui: {exc}", file=sys.stderr)
        return 2
    if options.listen:
        from gradtui.agent.main import listen_main
        from gradtui.wire.runtime import RuntimeDirError

        try:
            return listen_main(run)
        except RuntimeDirError as exc:  # before the script runs: its runtime file has nowhere to go
            print(f"gradtui: {exc}", file=sys.stderr)
            return 2
    if options.headless:
        return run_headless(run)
    from gradtui.ui.run import run_app  # imported late: headless runs never load Textual

    return run_app(run, theme=options.theme, untold_end=_recorded_end(run.record))


def _recorded_end(record: str | None) -> Callable[[ev.ScriptFinished], None] | None:
    """With a recording: write into it how the child agent ended when it died without saying
    (its writer died with it; gradtui.record.ending)."""
    if record is None:
        return None
    from gradtui.record.ending import note_ending

    return lambda end: note_ending(record, end.exit_status if end.exit_status is not None else 1, end.how or "")


def _native_setting_problem() -> str | None:
    """Why `GRADTUI_NATIVE` is not understood, or None (checked before anything runs)."""
    from gradtui.engine.hooks.native.setting import SettingError, mode

    try:
        mode()
    except SettingError as exc:
        return str(exc)
    return None


def run_headless(options: RunOptions) -> int:
    """Run the script with no UI, client and agent in this process (the script on its main
    thread); print to stdout (the script's stderr to stderr); stream the report and the recording
    as passes end; return the exit status (OUTPUT_FAILED if the script succeeded but they could
    not be written)."""
    from gradtui.clients.headless import HeadlessDriver
    from gradtui.engine.capture.graph import allow_deep_graphs
    from gradtui.engine.process.exits import IGNORED_INTERRUPT, FatalSignals, die_at_exit
    from gradtui.engine.process.runner import ScriptRunner, exit_now

    allow_deep_graphs()  # the script runs on this (the main) thread: freeing a deep graph must not overflow
    try:
        agent = build_agent(options, None)
    except OutputError as exc:
        print(f"gradtui: {exc}", file=sys.stderr)
        return OUTPUT_FAILED
    session, outputs = agent.session, agent.outputs
    # The driver reads a pass's graph only at its pauses (the size at its start): a pass in continue
    # is captured lazily unless a report or recording wants its graph. It prints no node's results,
    # so it takes a planned pass's batches unread: no NodeRan is made for it. It reads a pass's flow
    # only for a `flow` command: without one a hooked pass computes none for it.
    driver = HeadlessDriver(session, options.commands, sys.stdout, sys.stderr, sole=True)
    session.add_listener(driver, graph=False, batches=True, flow=driver.reads_flow)

    def hard_exit(status: int) -> None:  # the script went on after quit: finish the outputs, then end
        for line in outputs.close():
            print(line, file=sys.stderr)
        exit_now(status)

    runner = ScriptRunner(options.script, options.args, session, hard_exit=hard_exit, module=options.module)

    def last_words(signum: int) -> None:  # SIGTERM / SIGHUP: the report says how the run ended
        runner.end_by_signal(signum)
        for line in outputs.close():
            print(line, file=sys.stderr)

    fatal = FatalSignals(last_words)
    fatal.install()
    status = 1
    try:
        status = runner.run()  # runner.QUIT_STATUS (130) when the user quit
    finally:  # a signal waits until the outputs are closed (gradtui.engine.process.deferral), then acts
        failures = outputs.close()
        for line in failures:
            print(line, file=sys.stderr)
        if fatal.restore() is not None:
            print(IGNORED_INTERRUPT, file=sys.stderr)
    die_at_exit(runner.exit_signal)  # an unhandled KeyboardInterrupt: SIGINT at exit, as python
    return OUTPUT_FAILED if failures and status == 0 else status


if __name__ == "__main__":
    sys.exit(main())
