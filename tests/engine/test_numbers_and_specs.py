"""Numbers and break specs of the command language: a number is what
int()/float() read (so `²`, a digit to str.isdigit(), is a refusal, never an exception), labels
are any Python identifier, a spec that can never fire is refused, and one that matches no node of
the paused pass is accepted with a warning (`warning_for`)."""

from __future__ import annotations

import networkx as nx
import pytest
import torch

from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import matches_node, parse_spec, warning_for
from gradtui.protocol.commands import CommandError, Delete, Scale, Typed, parse, parse_float, parse_int
from gradtui.protocol.nodes import NodeInfo
from tests.helpers import output_of, run_headless

pytestmark = pytest.mark.timeout(60)

ODD_DIGITS = ["²", "³", "¹", "½", "⑤", "Ⅻ", "𝟙𝟚"]
"""Characters str.isdigit()/isnumeric() accept and int() refuses (𝟙𝟚: int() reads it, float() too)."""


@pytest.mark.parametrize(
    "word", ["12", "+3", " 7 ", "1_000", "١٢", "٣", "0", "-4", "²", "x", "", "1.5", "1e3", "nan", "𝟙𝟚", "⑤"]
)
def test_parse_int_accepts_exactly_what_int_accepts(word):
    try:
        want = int(word)
    except ValueError:
        with pytest.raises(CommandError, match="is not a whole number"):
            parse_int(word, "n")
    else:
        assert parse_int(word, "n") == want


@pytest.mark.parametrize(
    "word", ["1.5", "-2", "1e-3", "1_0.5", "٣", "²", "x", "", "0x10", " 4 ", "nan", "inf", "-inf", "1e400", "Infinity"]
)
def test_parse_float_accepts_exactly_what_float_accepts_when_finite(word):
    try:
        want = float(word)
    except ValueError:
        with pytest.raises(CommandError, match="is not a number"):
            parse_float(word, "f")
        return
    if want != want or want in (float("inf"), float("-inf")):
        with pytest.raises(CommandError, match="must be finite"):
            parse_float(word, "f")
    else:
        assert parse_float(word, "f") == want


def test_parse_int_minimum():
    assert parse_int("0", "n", minimum=0) == 0
    with pytest.raises(CommandError, match="must be at least 0"):
        parse_int("-1", "n", minimum=0)


@pytest.mark.parametrize("digit", ODD_DIGITS)
def test_odd_digits_in_every_numeric_command(digit):
    """Each is a refusal with a message or the number int()/float() read, never an exception."""
    for verb, kind in (("delete", Delete), ("scale", Scale), ("clip", None)):
        try:
            command = parse(f"{verb} {digit}")
        except CommandError as exc:
            assert str(exc)
        else:
            assert kind is None or isinstance(command, kind)
    for spec in (f"#{digit}", f"pass {digit}", f"norm>{digit}", f"loss>{digit}", f"x.py:{digit}"):
        try:
            parse(f"break {spec}")
        except CommandError as exc:
            assert str(exc)


def test_delete_superscript_two_is_refused_with_the_usual_message():
    with pytest.raises(CommandError, match=r"delete takes a breakpoint number or 'all' \(got '²'\)"):
        parse("delete ²")
    assert parse("delete ١٢") == Delete("delete ١٢", 12)  # Arabic-Indic digits: int() reads them


def test_delete_superscript_through_a_session_is_a_refusal_and_the_run_goes_on(tmp_path):
    path = tmp_path / "s.py"
    path.write_text(
        "import torch\nx = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()\n"
        "print('done', x.grad.tolist())\n"
    )
    run = run_headless(str(path), ["break nan", "delete ²", "delete 1", "continue"])
    assert run.status == 0, run.output
    assert "error: delete takes a breakpoint number or 'all' (got '²')" in run.output
    assert [(r.ok, r.text) for r in run.results()] == [(True, "breakpoint 1 at nan"), (True, "deleted 1")]
    assert "done [2.0, 2.0]" in output_of(run.events)


def test_delete_superscript_typed_is_a_refusal():
    assert Typed.of("delete ²") == ("delete ²", None, "delete takes a breakpoint number or 'all' (got '²')")


# ---- break specs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("ŷ", "ŷ"),
        ("δx", "δx"),
        ("_", "_"),
        ("℘", "℘"),
        ("x٣", "x٣"),
        ("ŷ[2].b", "ŷ[2].b"),
        ("ﬁ", "fi"),  # Python reads identifiers in NFKC form: the variable ﬁ is named fi
        ("layers.0.attn", "layers.0.attn"),
        ("Ω.weight", "Ω.weight"),
    ],
)
def test_labels_are_python_identifiers(text, value):
    spec = parse_spec(text)
    assert (spec.kind, spec.value, spec.text) == ("label", value, text)
    if "." not in text and "[" not in text:
        namespace: dict = {}
        exec(f"{text} = 1", namespace)  # Python takes it as a name, under the same key
        assert value in namespace


@pytest.mark.parametrize("text", ["x²", "x.²", "١x", "x+y", "a..b", "outs[a]", "outs[1]x", "x-y", "𝟙"])
def test_what_python_refuses_as_a_name_is_refused(text):
    with pytest.raises(CommandError, match="bad break spec"):
        parse_spec(text)


@pytest.mark.parametrize("text", ["norm>nan", "norm>inf", "norm > -inf", "loss>nan", "loss>inf", "norm>1e999"])
def test_a_spec_that_can_never_fire_is_refused(text):
    with pytest.raises(CommandError, match="must be finite"):
        parse(f"break {text}")


def test_break_on_a_unicode_name_stops_there(tmp_path):
    path = tmp_path / "hat.py"
    path.write_text(
        "import torch\nx = torch.ones(2, requires_grad=True)\nŷ = x * 3\nloss = (ŷ ** 2).sum()\nloss.backward()\n"
    )
    run = run_headless(str(path), ["break ŷ", "continue", "continue"])
    assert run.status == 0, run.output
    reasons = [(p.name, p.reason) for p in run.pauses]
    assert reasons[1] == ("MulBackward0", "breakpoint 1: ŷ")
    assert [r.text for r in run.results()][0] == "breakpoint 1 at ŷ"


# ---- warnings for specs that match no node -------------------------------------------------


@pytest.fixture
def graph() -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_node(0, info=NodeInfo("SumBackward0", "op", 2, (1,), labels=("total",), path="/home/u/train.py", line=9))
    g.add_node(1, info=NodeInfo("AddmmBackward0", "op", 1, (2,), module="encoder.fc", path="/home/u/model.py", line=3))
    g.add_node(2, info=NodeInfo("AccumulateGrad", "accumulate", None, (), param="encoder.fc.weight"))
    return g


@pytest.mark.parametrize(
    ("text", "warning"),
    [
        ("AddmmBackward0", None),
        ("MulBackward0", "no node of this pass matches it"),
        ("total", None),
        ("encoder.fc.weight", None),
        ("totally", "no node of this pass matches it"),
        ("#2", None),
        ("#3", "no node of this pass matches it"),
        ("module encoder", None),
        ("module encoder.*", None),
        ("module no.such", "no node of this pass ran in a module that matches it"),
        ("model.py:3", None),
        ("u/model.py:3", None),
        ("model.py:4", "no node of this pass was made at that line"),
        ("nosuch.py:3", "no node of this pass was made in nosuch.py"),
        ("pass 4", None),
        ("pass 3", "pass 3 has already begun; a pass breakpoint stops at the first node of its pass"),
        ("pass 0", "pass 0 has already begun; a pass breakpoint stops at the first node of its pass"),
        ("nan", None),
        ("norm>1", None),
        ("loss>1", None),
        ("loss nan", None),
    ],
)
def test_warning_for(graph, text, warning):
    spec = parse_spec(text)
    assert warning_for(spec, graph, 3) == warning
    if spec.kind in ("op", "label", "id", "module", "source"):  # the warning says exactly: no node matches
        matched = any(matches_node(spec, data, i, 3, False) for i, data in graph.nodes(data="info"))
        assert matched == (warning is None)


def test_warning_for_a_captured_graph():
    from gradtui.engine.capture.graph import Names, capture

    x = torch.ones(2, requires_grad=True)
    ŷ = x * 3
    loss = ŷ.sum()
    cap = capture([loss.grad_fn], Names.from_scopes({"x": x, "ŷ": ŷ, "loss": loss}))
    assert warning_for(parse_spec("ŷ"), cap.graph, 0) is None
    assert warning_for(parse_spec("module no.such"), cap.graph, 0) is not None
    assert warning_for(parse_spec("nosuch.py:3"), cap.graph, 0) == "no node of this pass was made in nosuch.py"


def test_a_warned_spec_is_still_a_breakpoint(tmp_path):
    """`break module no.such` while paused is accepted (a later pass may have it), as before."""
    path = tmp_path / "s.py"
    path.write_text("import torch\nx = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()\n")
    run = run_headless(str(path), ["break module no.such", "break nosuch.py:3", "breakpoints", "continue"])
    assert run.status == 0, run.output
    assert [r.ok for r in run.results()] == [True, True, True]
    assert "1: module no.such" in run.results()[2].text and "2: nosuch.py:3" in run.results()[2].text
    assert not run.of(ev.BreakpointHit)
