"""The one command language: `parse` turns a line of text into a command object, and the
command classes are its one table (each with its words, its help line and where it works).

A line is parsed once, where it enters (the UI's `send`, the headless driver, the feeder of
`-c`/`-x`, `--break`): from there on it is a command object, which a client hands its target, the
wire carries (`wire_form` / `from_wire_form`: a msgspec tagged union, the class name its tag) and
a torchrun job's hub hands its ranks; no one parses the text again. A command keeps its text,
for the echo and the answer.
"""

from __future__ import annotations

import enum
import textwrap
from collections.abc import Iterable
from typing import Any, ClassVar, NamedTuple, Union

import msgspec

from gradtui.protocol.breakpoints import (
    KINDS,
    CommandError,
    Spec,
    as_label,
    forms,
    parse_float,
    parse_int,
    parse_spec,
    shown,
)

__all__ = ["CommandError", "parse_float", "parse_int", "shown"]  # and every command class below


class Where(enum.Flag):
    """Where a command works: a live run, a replay of a recording, a torchrun job's hub."""

    LIVE = enum.auto()
    REPLAY = enum.auto()
    JOB = enum.auto()
    EVERYWHERE = LIVE | REPLAY | JOB


class Command(msgspec.Struct, frozen=True, tag=True):
    """Base class: every command keeps the text it was parsed from; on the wire a command is
    tagged with its class name (`tag=True`), so the receiver rebuilds the same class.

    A command class with a `verb` is a row of the one command table (`COMMANDS`): its words,
    its help line and where it works live on the class, and the parser, `help`, the palette, the
    CLI's epilog and the docs all read them from there. Adding a command is adding a class."""

    text: str

    verb: ClassVar[str] = ""
    """The word that starts it (several classes may share one: `flow`, `flow N`)."""
    aliases: ClassVar[tuple[str, ...]] = ()
    usage: ClassVar[str] = ""
    """How help writes it (`break SPEC`); the verb when empty."""
    summary: ClassVar[str] = ""
    """Its line in help; empty for a form another row of the same verb already explains."""
    manual: ClassVar[str] = ""
    """Its row in the manual's command table (docs/usage.md, generated): the summary when empty."""
    where: ClassVar[Where] = Where.EVERYWHERE
    resumes: ClassVar[bool] = False
    """Does the command let the paused engine run on?"""
    needs_pause: ClassVar[bool] = False
    """Does it act on the paused node (so makes no sense while running)?"""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "verb" in cls.__dict__:
            COMMANDS.append(cls)

    @classmethod
    def parse(cls, line: str, rest: str) -> Command | None:
        """This command from a typed `line` whose words after the verb are `rest`, or None if
        the line is another form of the same verb (CommandError if it is this one's but wrong).
        A command without arguments refuses any."""
        if rest:
            raise CommandError(f"{cls.verb} takes no argument (got {rest!r})")
        return cls(line)

    @classmethod
    def alone(cls, line: str) -> bool:
        """Is `line` one of this command's words (its verb, an alias, any case) and nothing else,
        so this command if it takes no argument? Told from the words, without parsing the line
        (which is parsed once, when it is sent): `asks_flow` skims the -c / -x lines with it."""
        words = line.split()
        return len(words) == 1 and _words().get(words[0].lower()) == cls.verb

    @classmethod
    def help_usage(cls) -> str:
        """Help's left column: the usage and the aliases (`print [EXPR] (p)`)."""
        usage = cls.usage or cls.verb
        return f"{usage} ({', '.join(cls.aliases)})" if cls.aliases else usage


COMMANDS: list[type[Command]] = []
"""The command table: every command class with a verb, in the order help lists them."""


def _needs(verb: str, rest: str, what: str) -> str:
    """`rest`, or a CommandError saying what `verb` needs."""
    if not rest:
        raise CommandError(f"{verb} needs {what}")
    return rest


class Step(Command, frozen=True):
    """Run the paused node; pause before the next node the engine runs."""

    verb = "step"
    aliases = ("s",)
    summary = "run the paused node, pause before the next one"
    manual = "let the paused node run; pause before the next node (into the next pass if this one ends)"
    resumes = True


class Continue(Command, frozen=True):
    """Run until a breakpoint hits or the script ends."""

    verb = "continue"
    aliases = ("c",)
    summary = "run until a breakpoint hits or the script ends"
    resumes = True


class Finish(Command, frozen=True):
    """Run to the end of this pass; pause at the first node of the next pass."""

    verb = "finish"
    aliases = ("f",)
    summary = "run to the end of this pass, pause at the next pass"
    manual = "run to the end of this pass; pause at the first node of the next pass"
    resumes = True


class Break(Command, frozen=True):
    """Add a breakpoint with this spec (parsed with the line: it travels whole, never parsed again)."""

    spec: Spec
    verb = "break"
    aliases = ("b",)
    usage = "break SPEC"
    summary = "add a breakpoint (the specs are listed below)"
    manual = "add a breakpoint (specs below); `breakpoints` lists them, `delete N` / `delete all` removes"

    @classmethod
    def parse(cls, line: str, rest: str) -> Command | None:
        return cls(line, parse_spec(_needs("break", rest, f"a spec: {forms()}")))


class ListBreakpoints(Command, frozen=True):
    """List the breakpoints."""

    verb = "breakpoints"
    summary = "list breakpoints;  delete N | delete all  removes"


class Delete(Command, frozen=True):
    """Delete breakpoint `number`, or all of them when `number` is None."""

    number: int | None
    verb = "delete"
    aliases = ("d",)
    usage = "delete N|all"

    @classmethod
    def parse(cls, line: str, rest: str) -> Command | None:
        if rest == "all":
            return cls(line, None)
        try:
            return cls(line, parse_int(rest, "delete", minimum=0))
        except CommandError:
            got = f" (got {rest!r})" if rest else ""
            raise CommandError(f"delete takes a breakpoint number or 'all'{got}") from None


class Scale(Command, frozen=True):
    """Multiply the paused node's incoming gradient by `factor`."""

    factor: float
    verb = "scale"
    usage = "scale F"
    summary = "multiply the incoming gradient by F"
    manual = "multiply the paused node's incoming gradient by F"
    where = Where.LIVE | Where.JOB
    needs_pause = True

    @classmethod
    def parse(cls, line: str, rest: str) -> Command | None:
        return cls(line, parse_float(_needs("scale", rest, "a factor, e.g. scale 0.5"), "scale"))


class Zero(Command, frozen=True):
    """Set the paused node's incoming gradient to zero."""

    verb = "zero"
    summary = "set the incoming gradient to zero"
    where = Where.LIVE | Where.JOB
    needs_pause = True


class Clip(Command, frozen=True):
    """Clip the L2 norm of the paused node's incoming gradient to `max_norm`."""

    max_norm: float
    verb = "clip"
    usage = "clip N"
    summary = "clip the incoming gradient's L2 norm to N"
    manual = "clip the incoming gradient's L2 norm to N"
    where = Where.LIVE | Where.JOB
    needs_pause = True

    @classmethod
    def parse(cls, line: str, rest: str) -> Command | None:
        limit = parse_float(_needs("clip", rest, "a maximum norm, e.g. clip 1.0"), "clip")
        if limit < 0:
            raise CommandError("clip: the maximum norm must be >= 0")
        return cls(line, limit)


class SetGrad(Command, frozen=True):
    """Replace the incoming gradient by `expr` (a Python expression of `g` and `torch`)."""

    expr: str
    verb = "set"
    usage = "set EXPR"
    summary = "replace the gradient by EXPR of g and torch (same shape/dtype/device)"
    manual = "replace the incoming gradient by EXPR, a Python expression of `g`, `torch` and the variables where backward was called; same shape, dtype and device"
    where = Where.LIVE | Where.JOB
    needs_pause = True

    @classmethod
    def parse(cls, line: str, rest: str) -> Command | None:
        expr = _needs("set", rest, "an expression of g, e.g. set g.clamp(-1, 1)")
        _check_syntax(expr)
        return cls(line, expr)


class Print(Command, frozen=True):
    """Statistics of the incoming gradient, or of `expr`."""

    expr: str | None
    verb = "print"
    aliases = ("p",)
    usage = "print [EXPR]"
    summary = "statistics of the gradient, or of EXPR"
    manual = "statistics of the incoming gradient, or of EXPR (`p model.fc.weight.grad`)"
    needs_pause = True

    @classmethod
    def parse(cls, line: str, rest: str) -> Command | None:
        if rest:
            _check_syntax(rest)
        return cls(line, rest or None)


class Exec(Command, frozen=True):
    """`!STATEMENT`: run Python at the pause (pdb's `!`), in a namespace of `g` (the incoming
    gradient), `node`, `module`, the call-site variables and `torch`, kept for the rest of the
    pause; assigning `g` edits the gradient as `set` does."""

    source: str
    verb = "!"
    usage = "!STATEMENT"
    summary = "run Python at the pause: g, node, module, the call-site variables, torch (kept until the engine moves on); g = ... edits the gradient as set does"
    manual = (
        "run a Python statement at the pause (pdb's `!`) with `g` (the incoming gradient), `node`, "
        "`module`, the call-site variables and `torch`; names persist until the engine moves on, and "
        "`g = ...` is an edit, checked and recorded as `set` is"
    )
    where = Where.LIVE | Where.JOB
    needs_pause = True

    @classmethod
    def parse(cls, line: str, rest: str) -> Command | None:
        source = _needs("!", rest, "a Python statement, e.g. !print(g.norm()) or !g = g * 0.5")
        try:
            compile(source, "<gradtui>", "exec")
        except SyntaxError as exc:
            raise CommandError(f"syntax error in {shown(source)}: {exc.msg}") from None
        except (ValueError, RecursionError, MemoryError) as exc:  # a NUL byte (before 3.12); nested too deep
            raise CommandError(f"cannot compile {shown(source)}: {type(exc).__name__}: {exc}") from None
        return cls(line, source)


class Interact(Command, frozen=True):
    """`interact`: a Python console at the pause (pdb's `interact`), in the `!` namespace. A
    client's own command: the UI opens its console pane; a headless client has `!` instead."""

    verb = "interact"
    summary = "(the UI) a Python console at the pause, with the names ! has"
    where = Where.LIVE | Where.JOB


class BreakIn(Command, frozen=True):
    """`pause`: break in to a running script, as Ctrl-C does in pdb and pudb: pause at the next
    backward node the engine runs (in the pass in flight, else at the first node of the next).
    Taken while the script runs; at a pause there is nothing to do."""

    verb = "pause"
    summary = "break in: pause at the next backward node (Ctrl-C in the UI)"
    where = Where.LIVE | Where.JOB


class Why(Command, frozen=True):
    """Is the tensor `name` names on this pass's graph? If not, why its .grad stays None. `name`
    is a Python expression of the calling frame's variables, or a name gradtui prints and `break`
    takes (`0.weight`, `transformer.h.1.mlp.c_fc.weight`: a parameter's name in its model)."""

    name: str
    verb = "why"
    usage = "why NAME"
    summary = "is NAME on this pass's graph? why is its .grad None?"
    manual = "is the tensor NAME on this pass's graph? if not, why its `.grad` stays None (no `requires_grad`, detached or made under `no_grad`, a non-leaf without `retain_grad()`, not used by this pass's output)"
    where = Where.LIVE | Where.JOB
    needs_pause = True

    @classmethod
    def parse(cls, line: str, rest: str) -> Command | None:
        name = _needs(
            "why",
            rest,
            "a variable name, an expression or a parameter's name, e.g. why x, why model[0].weight or why 0.weight",
        )
        if as_label(name) is None:  # a parameter's name (0.weight) is no Python
            _check_syntax(name)
        return cls(line, name)


class FlowOf(Command, frozen=True):
    """`flow N`: pass N's gradient flow (a recording keeps every pass's)."""

    index: int
    verb = "flow"
    usage = "flow N"
    summary = "pass N's gradient flow (a recording keeps every pass's)"

    @classmethod
    def parse(cls, line: str, rest: str) -> Command | None:
        return cls(line, parse_int(rest, "flow", minimum=0)) if rest else None


class Flow(Command, frozen=True):
    """Show the gradient flow table (per parameter: grad norm, weight norm, ratio) of the last
    pass that finished."""

    verb = "flow"
    summary = "gradient flow of the last pass: grad/weight norm per parameter"


class ShowPass(Command, frozen=True):
    """`pass N`: show pass N: a kept pass in a live run's UI (a live run keeps none itself),
    any recorded pass in a replay, paused where the run stopped in it (else its first node)."""

    index: int
    verb = "pass"
    usage = "pass N"
    summary = "show pass N (a kept pass in the UI; any pass of a recording)"

    @classmethod
    def parse(cls, line: str, rest: str) -> Command | None:
        return cls(line, parse_int(_needs("pass", rest, "a pass number, e.g. pass 30"), "pass", minimum=0))


class Ranks(Command, frozen=True):
    """(torchrun job) List the ranks: where each is, its loss, its non-finite counts."""

    verb = "ranks"
    summary = "(a torchrun job) each rank: where it is, its loss, non-finite"
    where = Where.JOB


class Rank(Command, frozen=True):
    """(torchrun job) Show rank `number`: its graph, gradients and pause."""

    number: int
    verb = "rank"
    usage = "rank N"
    summary = "(a torchrun job) show rank N: its pass, pause and gradients"
    where = Where.JOB

    @classmethod
    def parse(cls, line: str, rest: str) -> Command | None:
        return cls(line, parse_int(_needs("rank", rest, "a rank number, e.g. rank 1"), "rank", minimum=0))


class Help(Command, frozen=True):
    """List the commands."""

    verb = "help"
    aliases = ("h", "?")
    summary = "this list"
    manual = "list the commands"


class Detach(Command, frozen=True):
    """Leave the script running without this client (an attached one); its breakpoints stay
    armed. A client's own command: the client leaves, the agent is not asked to run it."""

    verb = "detach"
    usage = "detach (D)"  # D is the UI's key: typed, `d` deletes
    summary = "leave the script running without this client (attached)"
    manual = "leave the script running without this client; its breakpoints stay armed"
    where = Where.LIVE | Where.JOB


class Quit(Command, frozen=True):
    """Stop the script and leave."""

    verb = "quit"
    aliases = ("q",)
    summary = "stop the script and leave"


_HIDDEN_ALIASES = {"n": "step", "next": "step", "cont": "continue", "exit": "quit"}
"""Words that also work but help does not list (pdb's `n`, `next`, `cont`, `exit`)."""


_WORDS: tuple[tuple[type[Command], ...], dict[str, str]] = ((), {})
"""`_words`' table, and the command classes it was made from."""


def _words() -> dict[str, str]:
    """Every word that starts a command, lower-cased, to its verb (made again only when the
    table's classes changed: one was added, or a test took its throwaway out)."""
    global _WORDS
    if _WORDS[0] != (table := tuple(COMMANDS)):
        words = dict(_HIDDEN_ALIASES)
        for command in COMMANDS:
            words[command.verb] = command.verb
            words.update({alias.lower(): command.verb for alias in command.aliases})
        _WORDS = (table, words)
    return _WORDS[1]


def help_rows(where: Where = Where.EVERYWHERE) -> list[tuple[str, str]]:
    """(usage, what it does) for every command that works `where`, in the table's order, with
    the break specs under `break`: `help`, the help screen and the docs list these."""
    rows: list[tuple[str, str]] = []
    for command in COMMANDS:
        if command.summary and command.where & where:
            rows.append((command.help_usage(), command.summary))
        if command is Break:
            rows.extend(
                ("", line)
                for line in textwrap.wrap(
                    "SPEC: " + " | ".join(kind.help_form() for kind in KINDS), 64, subsequent_indent="  "
                )
            )
    return rows


def manual_rows() -> list[tuple[str, str]]:
    """(usage, meaning) of every command for the manual's table (docs/usage.md is made from it)."""
    return [(command.help_usage(), command.manual or command.summary) for command in COMMANDS if command.summary]


def help_text(where: Where = Where.EVERYWHERE) -> str:
    """The `help` command's answer: the command table (what works `where`) as text."""
    return "\n".join(f"{usage:<20}{text}".rstrip() for usage, text in help_rows(where))


def parse(text: str) -> Command:
    """Parse one command line (once, where it enters: the command bar, `-c`, `-x`, a client);
    raise CommandError naming the problem."""
    line = text.strip()
    if not line:
        raise CommandError("empty command")
    verb: str | None
    if line.startswith("!"):  # `!STATEMENT`: the statement follows the `!` with or without a space
        word, verb, rest = "!", "!", line[1:].strip()
    else:
        word, _, rest = line.partition(" ")
        rest = rest.strip()
        verb = _words().get(word.lower())
    for command in COMMANDS:
        if command.verb == verb and (parsed := command.parse(line, rest)) is not None:
            return parsed
    raise CommandError(f"unknown command {word!r} (type 'help' for the list)")


_DECODER: tuple[tuple[type[Command], ...], msgspec.msgpack.Decoder[Any]] = ((), msgspec.msgpack.Decoder())
"""The decoder of the command table's tagged union, and the command classes it knows."""


def wire_form(command: Command) -> bytes:
    """`command` as MessagePack: its fields and its tag (its class name)."""
    return msgspec.msgpack.encode(command)


def from_wire_form(data: bytes) -> Command:
    """The command `wire_form` made `data` from: decoded as the union of the command table's
    classes (fixed fields of plain values, so nothing in it nests), or CommandError saying why
    not (an unknown tag, a field of the wrong type)."""
    global _DECODER
    if _DECODER[0] != (table := tuple(COMMANDS)):
        _DECODER = (table, msgspec.msgpack.Decoder(Union[table]))  # noqa: UP007 - a union made at run time
    try:
        command = _DECODER[1].decode(data)
    except msgspec.DecodeError as exc:
        raise CommandError(f"not a gradtui command: {exc}") from None
    assert isinstance(command, Command)
    return command


class Typed(NamedTuple):
    """A line as it was typed and what it parsed to: its command, or the parser's refusal
    (`error`, said to the user where the line entered, in the parser's words)."""

    text: str
    command: Command | None
    error: str | None = None

    @classmethod
    def of(cls, text: str) -> Typed:
        """`text` parsed (once: whoever holds the result passes it on)."""
        try:
            return cls(text, parse(text))
        except CommandError as exc:
            return cls(text, None, str(exc))


def asks_flow(lines: Iterable[str]) -> bool:
    """Is one of `lines` a `flow` (the last pass's gradient flow, not `flow N`)? Skimmed, not
    parsed: each line is parsed once, when it is sent, and a 200,000-line -x file is not parsed
    ahead of the run for this."""
    return any(Flow.alone(line) for line in lines)


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
        elif char == "#" and (not line[:i].strip() or line[i - 1].isspace() and (line[i + 1 :] + " ")[0].isspace()):
            return line[:i]
    return line
