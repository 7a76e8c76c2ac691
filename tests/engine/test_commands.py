"""The command language (gradtui.protocol.commands): every command and alias parses to the right
object, and every malformed line is refused with a message that says what is wrong."""

from __future__ import annotations

import pytest

from gradtui.protocol.breakpoints import Spec
from gradtui.protocol.commands import (
    Break,
    Clip,
    Command,
    CommandError,
    Continue,
    Delete,
    Finish,
    Flow,
    FlowOf,
    Help,
    ListBreakpoints,
    Print,
    Quit,
    Scale,
    SetGrad,
    ShowPass,
    Step,
    Why,
    Zero,
    help_text,
    parse,
    parse_file,
)

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("step", Step("step")),
        ("s", Step("s")),
        ("n", Step("n")),
        ("next", Step("next")),
        ("STEP", Step("STEP")),
        ("continue", Continue("continue")),
        ("c", Continue("c")),
        ("cont", Continue("cont")),
        ("finish", Finish("finish")),
        ("f", Finish("f")),
        ("zero", Zero("zero")),
        ("breakpoints", ListBreakpoints("breakpoints")),
        ("help", Help("help")),
        ("h", Help("h")),
        ("?", Help("?")),
        ("quit", Quit("quit")),
        ("q", Quit("q")),
        ("exit", Quit("exit")),
        ("break AddmmBackward0", Break("break AddmmBackward0", Spec("op", "AddmmBackward0", "AddmmBackward0"))),
        ("b z", Break("b z", Spec("label", "z", "z"))),
        ("break   fc.weight  ", Break("break   fc.weight", Spec("label", "fc.weight", "fc.weight"))),
        ("break 0.weight", Break("break 0.weight", Spec("label", "0.weight", "0.weight"))),
        ("break #3", Break("break #3", Spec("id", 3, "#3"))),
        ("break nan", Break("break nan", Spec("nan", None, "nan"))),
        ("break norm>2.5", Break("break norm>2.5", Spec("norm", 2.5, "norm>2.5"))),
        ("break pass 1", Break("break pass 1", Spec("pass", 1, "pass 1"))),
        ("delete 2", Delete("delete 2", 2)),
        ("d 1", Delete("d 1", 1)),
        ("delete all", Delete("delete all", None)),
        ("scale 0.5", Scale("scale 0.5", 0.5)),
        ("scale -2", Scale("scale -2", -2.0)),
        ("scale 1e-3", Scale("scale 1e-3", 1e-3)),
        ("clip 1.0", Clip("clip 1.0", 1.0)),
        ("clip 0", Clip("clip 0", 0.0)),
        ("set g * 3", SetGrad("set g * 3", "g * 3")),
        ("set g.clamp(-1, 1)", SetGrad("set g.clamp(-1, 1)", "g.clamp(-1, 1)")),
        ("print", Print("print", None)),
        ("p", Print("p", None)),
        ("print g.abs().max()", Print("print g.abs().max()", "g.abs().max()")),
        ("p g", Print("p g", "g")),
        ("why x", Why("why x", "x")),
        ("why model.fc", Why("why model.fc", "model.fc")),
        ("why model[0].weight", Why("why model[0].weight", "model[0].weight")),
        ("  step  ", Step("step")),
        ("pass 3", ShowPass("pass 3", 3)),  # one grammar: a replay's `pass N` and a live UI's alike
        ("PASS 0", ShowPass("PASS 0", 0)),
        ("flow", Flow("flow")),
        ("flow 12", FlowOf("flow 12", 12)),
    ],
)
def test_parse(text, expected):
    command = parse(text)
    assert type(command) is type(expected)
    assert command == expected


def test_command_flags():
    assert all(parse(t).resumes for t in ("step", "continue", "finish"))
    assert not any(parse(t).resumes for t in ("zero", "scale 2", "print", "break z", "help", "why x"))
    assert all(parse(t).needs_pause for t in ("zero", "scale 2", "clip 1", "set g", "print", "why x"))
    assert not any(parse(t).needs_pause for t in ("break z", "delete all", "breakpoints", "help", "step"))
    assert isinstance(parse("help"), Command)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty command"),
        ("   ", "empty command"),
        ("frobnicate", "unknown command 'frobnicate'"),
        ("stepp", "unknown command 'stepp'"),
        ("step 2", "step takes no argument (got '2')"),
        ("c now", "continue takes no argument"),
        ("zero all", "zero takes no argument"),
        ("quit now", "quit takes no argument"),
        ("break", "break needs a spec"),
        ("b", "break needs a spec"),
        ("break 1abc", "bad break spec '1abc'"),
        ("break a b", "bad break spec 'a b'"),
        ("break #x", "bad break spec '#x'"),
        ("break pass x", "bad break spec 'pass x'"),
        ("break norm>big", "break norm>X: 'big' is not a number"),
        ("delete", "delete takes a breakpoint number or 'all'"),
        ("delete x", "delete takes a breakpoint number or 'all'"),
        ("delete -1", "delete takes a breakpoint number or 'all'"),
        ("scale", "scale needs a factor"),
        ("scale half", "scale: 'half' is not a number"),
        ("scale nan", "scale: 'nan' must be finite"),
        ("scale inf", "scale: 'inf' must be finite"),
        ("clip", "clip needs a maximum norm"),
        ("clip big", "clip: 'big' is not a number"),
        ("clip -1", "clip: the maximum norm must be >= 0"),
        ("clip inf", "clip: 'inf' must be finite"),
        ("set", "set needs an expression of g"),
        ("set g +", "syntax error in 'g +'"),
        ("set x = 3", "syntax error in 'x = 3'"),
        ("print g +", "syntax error in 'g +'"),
        ("why", "why needs a variable name"),
        ("why 1x", "syntax error in '1x'"),
        ("pass", "pass needs a pass number"),
        ("pass x", "pass: 'x' is not a whole number"),
        ("pass -1", "pass: '-1' must be at least 0"),
        ("flow x", "flow: 'x' is not a whole number"),
    ],
)
def test_parse_errors(text, message):
    with pytest.raises(CommandError) as info:
        parse(text)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "name",
    [
        "1.weight",
        "0.weight",
        "transformer.h.1.mlp.c_fc.weight",
        "layers.0.attn.in_proj_bias",
        "outs[1]",
        "fc.weight",
        "ŷ",
    ],
)
def test_why_takes_every_name_break_takes(name):
    """`why` refused the parameter names gradtui prints (`1.weight` is no Python) while `break`
    took them: both take the same names."""
    assert parse(f"break {name}") == Break(f"break {name}", Spec("label", name, name))
    assert parse(f"why {name}") == Why(f"why {name}", name)


def test_command_error_is_a_value_error():
    assert issubclass(CommandError, ValueError)


def test_help_lists_every_command():
    text = help_text()
    for word in (
        "step",
        "continue",
        "finish",
        "break",
        "breakpoints",
        "delete",
        "scale",
        "zero",
        "clip",
        "set",
        "print",
        "why",
        "help",
        "quit",
    ):
        assert word in text
    for spec in ("nan", "norm>X", "pass N", "#ID", "differs>R", "loss nan"):
        assert spec in text


def test_parse_file(tmp_path):
    path = tmp_path / "commands.txt"
    path.write_text("# a comment\n\nbreak nan\n  continue  \n# another\nscale 0.5\n", encoding="utf-8")
    assert parse_file(str(path)) == ["break nan", "continue", "scale 0.5"]
    assert [type(parse(line)) for line in parse_file(str(path))] == [Break, Continue, Scale]


def test_parse_file_trailing_comments_and_byte_order_mark(tmp_path):
    path = tmp_path / "commands.txt"
    path.write_bytes(
        "\ufeff# written on Windows\r\n"
        "break nan   # the first NaN\r\n"
        "break #3\t# node 3, not a comment\r\n"
        "step #\r\n"
        "  # indented comment\r\n"
        "print g#x\r\n"
        "set g * (name == 'a # b')  # keeps its string\r\n".encode("utf-8")
    )
    lines = parse_file(str(path))
    assert lines == ["break nan", "break #3", "step", "print g#x", "set g * (name == 'a # b')"]
    assert [type(parse(line)) for line in lines] == [Break, Break, Step, Print, SetGrad]


def test_parse_file_missing(tmp_path):
    with pytest.raises(OSError):
        parse_file(str(tmp_path / "nope.txt"))


def test_one_breakpoint_handler_answers_break_delete_and_the_list():
    from gradtui.protocol import breakpoint_commands
    from gradtui.protocol.breakpoints import Breakpoints

    bps = Breakpoints()
    answer = breakpoint_commands.answer
    assert answer(bps, parse("breakpoints")) == "no breakpoints"
    assert (
        answer(bps, parse("b nan"), notes=lambda bp: ["it may never stop", "but late"])
        == "breakpoint 1 at nan (it may never stop) (but late)"
    )
    assert answer(bps, parse("break y")) == "breakpoint 2 at y"
    assert (
        answer(bps, parse("breakpoints"), listing=lambda: ["recorded hits:"])
        == "1: nan  (never hit)\n2: y  (never hit)\nrecorded hits:"
    )
    assert answer(bps, parse("delete 1")) == "deleted 1"
    with pytest.raises(CommandError):
        answer(bps, parse("delete 9"))
    assert answer(bps, parse("delete all")) == "deleted 2" and len(bps) == 0
    assert answer(bps, parse("step")) is None  # not a breakpoint command
    assert breakpoint_commands.CHANGES == (Break, Delete)
