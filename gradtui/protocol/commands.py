"""The one command language (DESIGN.md): `parse` turns a line of text into a command object.

The UI's command bar, `-c`/`-x` on the command line and the tests all go through `parse`,
so a command means the same thing everywhere.
"""

from __future__ import annotations

import msgspec

from gradtui.protocol.breakpoints import parse_spec
from gradtui.protocol.words import CommandError, parse_float, parse_int, shown

__all__ = ["CommandError", "parse_float", "parse_int", "shown"]  # and every command class below


class Command(msgspec.Struct, frozen=True):
    """Base class: every command keeps the text it was parsed from."""

    text: str

    resumes = False
    """Does the command let the paused engine run on?"""
    needs_pause = False
    """Does it act on the paused node (so makes no sense while running)?"""


class Step(Command):
    """Run the paused node; pause before the next node the engine runs."""

    resumes = True


class Continue(Command):
    """Run until a breakpoint hits or the script ends."""

    resumes = True


class Finish(Command):
    """Run to the end of this pass; pause at the first node of the next pass."""

    resumes = True


class Break(Command):
    """Add a breakpoint with this spec."""

    spec: str


class ListBreakpoints(Command):
    """List the breakpoints."""


class Delete(Command):
    """Delete breakpoint `number`, or all of them when `number` is None."""

    number: int | None


class Scale(Command):
    """Multiply the paused node's incoming gradient by `factor`."""

    factor: float
    needs_pause = True


class Zero(Command):
    """Set the paused node's incoming gradient to zero."""

    needs_pause = True


class Clip(Command):
    """Clip the L2 norm of the paused node's incoming gradient to `max_norm`."""

    max_norm: float
    needs_pause = True


class SetGrad(Command):
    """Replace the incoming gradient by `expr` (a Python expression of `g` and `torch`)."""

    expr: str
    needs_pause = True


class Print(Command):
    """Statistics of the incoming gradient, or of `expr`."""

    expr: str | None
    needs_pause = True


class Why(Command):
    """Is the tensor in variable `name` on this pass's graph? If not, why its .grad stays None."""

    name: str
    needs_pause = True


class BreakIn(Command):
    """`pause`: break in to a running script, as Ctrl-C does in pdb and pudb: pause at the next
    backward node the engine runs (in the pass in flight, else at the first node of the next).
    Taken while the script runs; at a pause there is nothing to do."""


class Exec(Command):
    """`!STATEMENT`: run Python at the pause (pdb's `!`), in a namespace of `g` (the incoming
    gradient), `node`, `module`, the call-site variables and `torch`, kept for the rest of the
    pause; assigning `g` edits the gradient as `set` does."""

    source: str
    needs_pause = True


class Interact(Command):
    """`interact`: a Python console at the pause (pdb's `interact`), in the `!` namespace. A
    client's own command: the UI opens its console pane; a headless client has `!` instead."""


class Help(Command):
    """List the commands."""


class Flow(Command):
    """Show the gradient flow table (per parameter: grad norm, weight norm, ratio) of the last
    pass that finished."""


class Quit(Command):
    """Stop the script and leave."""


class Detach(Command):
    """Leave the script running without this client (an attached one); its breakpoints stay
    armed. A client's own command: the client leaves, the agent is not asked to run it."""


class ShowPass(Command):
    """`pass N`: show pass N: a kept pass in a live run's UI (a live run keeps none itself),
    any recorded pass in a replay, paused where the run stopped in it (else its first node)."""

    index: int


class FlowOf(Command):
    """`flow N`: pass N's gradient flow (a recording keeps every pass's)."""

    index: int


HELP = """\
step (s)            run the paused node, pause before the next one
continue (c)        run until a breakpoint hits or the script ends
finish (f)          run to the end of this pass, pause at the next pass
break SPEC (b)      add a breakpoint: OP | NAME | #ID | nan | norm>X | pass N
                    | loss>X | loss nan | FILE.py:LINE | module PATH (globs: layers.*.attn)
                    | diverge (a torchrun job: gradients that differ across ranks)
breakpoints         list breakpoints;  delete N | delete all  removes
scale F             multiply the incoming gradient by F
zero                set the incoming gradient to zero
clip N              clip the incoming gradient's L2 norm to N
set EXPR            replace the gradient by EXPR of g and torch (same shape/dtype/device)
print [EXPR] (p)    statistics of the gradient, or of EXPR
!STATEMENT          run Python at the pause: g, node, module, the call-site variables, torch
                    (kept until the engine moves on); g = ... edits the gradient as set does
interact            (the UI) a Python console at the pause, with the names ! has
pause               break in: pause at the next backward node (Ctrl-C in the UI)
why NAME            is NAME on this pass's graph? why is its .grad None?
flow                gradient flow of the last pass: grad/weight norm per parameter
pass N              show pass N (a kept pass in the UI; any pass of a recording)
ranks               (a torchrun job) each rank: where it is, its loss, non-finite
rank N              (a torchrun job) show rank N: its pass, pause and gradients
help (h, ?)         this list
detach (D)          leave the script running without this client (attached)
quit (q)            stop the script and leave"""

_ALIASES = {
    "s": "step", "n": "step", "next": "step",
    "c": "continue", "cont": "continue",
    "f": "finish",
    "b": "break",
    "p": "print",
    "q": "quit", "exit": "quit",
    "h": "help", "?": "help",
    "d": "delete",
}


class Rank(Command):
    """(torchrun job) Show rank `number`: its graph, gradients and pause."""

    number: int


class Ranks(Command):
    """(torchrun job) List the ranks: where each is, its loss, its non-finite counts."""


_SIMPLE: dict[str, type[Command]] = {
    "step": Step, "continue": Continue, "finish": Finish, "zero": Zero, "breakpoints": ListBreakpoints,
    "help": Help, "quit": Quit, "flow": Flow, "detach": Detach, "ranks": Ranks, "pause": BreakIn,
    "interact": Interact,
}
"""The commands that take no argument (`flow` with one is `flow N`)."""


def parse(text: str) -> Command:
    """Parse one command line; raise CommandError naming the problem."""
    line = text.strip()
    if not line:
        raise CommandError("empty command")
    if line.startswith("!"):
        return _statement(line)
    word, _, rest = line.partition(" ")
    rest = rest.strip()
    verb = _ALIASES.get(word.lower(), word.lower())
    match verb:
        case "flow" if rest:
            return FlowOf(line, parse_int(rest, "flow", minimum=0))
        case _ if verb in _SIMPLE:
            if rest:
                raise CommandError(f"{verb} takes no argument (got {rest!r})")
            return _SIMPLE[verb](line)
        case "break" | "rank" | "pass" | "delete":
            return _numbered(verb, line, rest)
        case "scale" | "clip" | "set" | "print" | "why":
            return _on_gradient(verb, line, rest)
    raise CommandError(f"unknown command {word!r} (type 'help' for the list)")


def _numbered(verb: str, line: str, rest: str) -> Command:
    """`break SPEC`, `rank N`, `pass N`, `delete N|all`."""
    match verb:
        case "break":
            if not rest:
                raise CommandError("break needs a spec: OP | NAME | #ID | nan | norm>X | pass N | loss>X | loss nan"
                                   " | FILE.py:LINE | module PATH")
            parse_spec(rest)
            return Break(line, rest)
        case "rank":
            if not rest:
                raise CommandError("rank needs a rank number, e.g. rank 1")
            return Rank(line, parse_int(rest, "rank", minimum=0))
        case "pass":
            if not rest:
                raise CommandError("pass needs a pass number, e.g. pass 30")
            return ShowPass(line, parse_int(rest, "pass", minimum=0))
    if rest == "all":
        return Delete(line, None)
    try:
        return Delete(line, parse_int(rest, "delete", minimum=0))
    except CommandError:
        got = f" (got {rest!r})" if rest else ""
        raise CommandError(f"delete takes a breakpoint number or 'all'{got}") from None


def _on_gradient(verb: str, line: str, rest: str) -> Command:
    """The commands on the paused node's gradient: `scale F`, `clip N`, `set EXPR`, `print [EXPR]`, `why NAME`."""
    needs = {"scale": "a factor, e.g. scale 0.5", "clip": "a maximum norm, e.g. clip 1.0",
             "set": "an expression of g, e.g. set g.clamp(-1, 1)",
             "why": "a variable name or expression, e.g. why x or why model[0].weight"}
    if not rest and verb in needs:
        raise CommandError(f"{verb} needs {needs[verb]}")
    match verb:
        case "scale":
            return Scale(line, parse_float(rest, "scale"))
        case "clip":
            limit = parse_float(rest, "clip")
            if limit < 0:
                raise CommandError("clip: the maximum norm must be >= 0")
            return Clip(line, limit)
        case "print" if not rest:
            return Print(line, None)
    _check_syntax(rest)
    match verb:
        case "set":
            return SetGrad(line, rest)
        case "print":
            return Print(line, rest)
    return Why(line, rest)


def _statement(line: str) -> Exec:
    """`!STATEMENT`: Python to run at the pause (one line, or several from the UI's console)."""
    source = line[1:].strip()
    if not source:
        raise CommandError("! needs a Python statement, e.g. !print(g.norm()) or !g = g * 0.5")
    try:
        compile(source, "<gradtui>", "exec")
    except SyntaxError as exc:
        raise CommandError(f"syntax error in {shown(source)}: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # a NUL byte (before 3.12); nested too deep
        raise CommandError(f"cannot compile {shown(source)}: {type(exc).__name__}: {exc}") from None
    return Exec(line, source)


def _check_syntax(expr: str) -> None:
    try:
        compile(expr, "<expr>", "eval")
    except SyntaxError as exc:
        raise CommandError(f"syntax error in {shown(expr)}: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # a NUL byte (before 3.12); nested too deep
        why = f"{type(exc).__name__}: {exc}" if str(exc) else f"{type(exc).__name__} (nested too deep?)"
        raise CommandError(f"cannot compile {shown(expr)}: {why}") from None


def parse_file(path: str) -> list[str]:
    """Command lines of a `-x FILE`: one per line; blank lines, `#` comment lines and trailing
    ` # comments` dropped (a `#` glued to a word, as in `break #3`, is not a comment)."""
    with open(path, encoding="utf-8-sig") as handle:  # -sig: an editor's byte-order mark is not a command
        lines = [_strip_comment(line).strip() for line in handle]
    return [line for line in lines if line]


def _strip_comment(line: str) -> str:
    """`line` without a `#` comment: one at the start, or after white space and followed by
    white space or the end, outside quotes (`set g * (s == "a # b")` keeps its string)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (not line[:i].strip() or line[i - 1].isspace() and (line[i + 1:] + " ")[0].isspace()):
            return line[:i]
    return line

