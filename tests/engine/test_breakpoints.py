"""Breakpoint specs and matching (gradtui.protocol.breakpoints), without a running engine: each spec
kind parses, matches where it should and nowhere else; numbering and deletion."""

from __future__ import annotations

import re

import pytest
import torch

from gradtui.engine.stats.summary import summarize
from gradtui.protocol.breakpoints import Breakpoints, Spec, matches_grads, matches_node, parse_spec
from gradtui.protocol.commands import CommandError
from gradtui.protocol.nodes import NodeInfo

pytestmark = pytest.mark.timeout(60)


def node(
    name: str = "MulBackward0",
    labels: tuple[str, ...] = (),
    param: str | None = None,
    module: str | None = None,
    path: str | None = None,
    line: int | None = None,
) -> NodeInfo:
    return NodeInfo(name, "op", 0, (), labels, param, None, path, line, module)


def stats(*values: float):
    return (summarize(torch.tensor(values)),)


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("AddmmBackward0", "op", "AddmmBackward0"),
        ("torch::autograd::AccumulateGrad", "op", "AccumulateGrad"),
        ("AccumulateGrad", "op", "AccumulateGrad"),
        ("DoubleBackward", "op", "DoubleBackward"),
        ("z", "label", "z"),
        ("fc.weight", "label", "fc.weight"),
        ("outs[1]", "label", "outs[1]"),
        ("0.weight", "label", "0.weight"),  # nn.Sequential's parameters
        ("encoder.layers.3.linear1.bias", "label", "encoder.layers.3.linear1.bias"),
        ("#17", "id", 17),
        ("nan", "nan", None),
        ("norm>2.5", "norm", 2.5),
        ("norm > 1e3", "norm", 1000.0),
        ("pass 0", "pass", 0),
        ("pass  12", "pass", 12),
        ("  z  ", "label", "z"),
        ("torch::autograd::CopySlices", "op", "CopySlices"),
        ("CopySlices", "label", "CopySlices"),  # a bare name: matched as a label or an op name
        ("loss>3", "loss", 3.0),
        ("loss > 1e4", "loss", 1e4),
        ("loss nan", "lossnan", None),
        ("module fc2", "module", "fc2"),
        ("module encoder.layers.*.attn", "module", "encoder.layers.*.attn"),
        ("model.py:42", "source", ("model.py", 42)),
        ("src/pkg/model.py:7", "source", ("src/pkg/model.py", 7)),
    ],
)
def test_parse_spec_kinds(text, kind, value):
    spec = parse_spec(text)
    assert (spec.kind, spec.value, spec.text) == (kind, value, text.strip())


@pytest.mark.parametrize(
    "text", ["", "a b", "#", "#-1", "pass -1", "norm>", "1x", "x+y", "norm<3", "a..b", "x.", "outs[a]"]
)
def test_parse_spec_refuses(text):
    with pytest.raises(CommandError, match="bad break spec|is not a number"):
        parse_spec(text)


@pytest.mark.parametrize(
    ("text", "form"),
    [
        ("pass", "pass N"),
        ("norm", "norm>X"),
        ("loss", "loss>X"),
        ("loss<3", "loss nan"),
        ("module", "module PATH"),
        ("model.py:", "FILE.py:LINE"),
        ("model.py:x", "FILE.py:LINE"),
        ("differs", "differs>R"),
    ],
)
def test_pass_and_norm_need_their_number(text, form):
    """A spec that starts as a kind's does but is not one is refused with that kind's form."""
    with pytest.raises(CommandError, match=f"bad break spec .*write .*{re.escape(form)}"):
        parse_spec(text)


def test_norm_spec_needs_a_number():
    with pytest.raises(CommandError, match="'big' is not a number"):
        parse_spec("norm>big")


def test_op_matching():
    spec = parse_spec("torch::autograd::AccumulateGrad")
    assert matches_node(spec, node("AccumulateGrad"), 3, 0, False)
    assert not matches_node(spec, node("MulBackward0"), 3, 0, False)
    spec = parse_spec("MulBackward0")
    assert matches_node(spec, node("MulBackward0"), 0, 5, False)
    assert not matches_node(spec, node("MulBackward1"), 0, 5, False)


def test_label_matching_covers_labels_and_params():
    spec = parse_spec("fc.weight")
    assert matches_node(spec, node("AccumulateGrad", param="fc.weight"), 4, 0, False)
    assert matches_node(spec, node("AccumulateGrad", labels=("fc.weight",)), 4, 0, False)
    assert not matches_node(spec, node("AccumulateGrad", param="fc.bias"), 4, 0, False)
    spec = parse_spec("y")
    assert matches_node(spec, node(labels=("h", "y")), 1, 0, False)
    assert not matches_node(spec, node(labels=("yy",)), 1, 0, False)


def test_id_and_pass_matching():
    spec = parse_spec("#2")
    assert matches_node(spec, node(), 2, 0, False)
    assert not matches_node(spec, node(), 3, 0, False)
    spec = parse_spec("pass 1")
    assert matches_node(spec, node(), 7, 1, True)
    assert not matches_node(spec, node(), 7, 1, False)  # not the first node of the pass
    assert not matches_node(spec, node(), 0, 0, True)  # the first node of another pass


def test_value_specs_do_not_match_by_position():
    for text in ("nan", "norm>1"):
        assert not matches_node(parse_spec(text), node(), 0, 0, True)
    for text in ("z", "#0", "pass 0", "MulBackward0"):
        assert not matches_grads(parse_spec(text), stats(float("nan")))


def test_nan_matching():
    spec = parse_spec("nan")
    assert matches_grads(spec, stats(1.0, float("nan")))
    assert matches_grads(spec, stats(float("inf")))
    assert matches_grads(spec, (None,) + stats(float("-inf")))
    assert not matches_grads(spec, stats(1.0, 2.0))
    assert not matches_grads(spec, (None,))
    assert not matches_grads(spec, stats(float("nan")), nan_seen=True)  # only the first of a pass


def test_norm_matching():
    spec = parse_spec("norm>5")
    assert matches_grads(spec, stats(3.0, 4.5))  # norm 5.4
    assert not matches_grads(spec, stats(3.0, 4.0))  # norm exactly 5
    assert matches_grads(spec, stats(0.0) + stats(6.0))  # any of the gradients
    assert not matches_grads(spec, (None,))


def test_numbering_listing_and_deletion():
    bps = Breakpoints()
    one = bps.add(parse_spec("z"))
    two = bps.add(parse_spec("nan"))
    assert (one.number, two.number) == (1, 2)
    assert len(bps) == 2 and [bp.number for bp in bps] == [1, 2]
    assert str(one) == "1: z  (never hit)"
    assert bps.could_stop(5)
    assert bps.delete(2) == [two]
    assert bps.could_stop(5)  # z still may stop anywhere
    with pytest.raises(CommandError, match="no breakpoint 2"):
        bps.delete(2)
    three = bps.add(parse_spec("pass 1"))
    assert three.number == 3  # numbers are never reused
    assert bps.delete(None) == [one, three]
    assert len(bps) == 0 and list(bps) == []
    with pytest.raises(CommandError, match="bad break spec"):
        bps.add(parse_spec("a b"))
    assert bps.add(parse_spec("y")).number == 4  # a refused spec used no number


def test_find_returns_the_first_match():
    bps = Breakpoints()
    bps.add(parse_spec("AddBackward0"))
    bps.add(parse_spec("y"))
    bps.add(parse_spec("norm>10"))
    found = bps.find(node(labels=("y",)), 1, 0, False, stats(12.0))
    assert found is not None and found.number == 2
    found = bps.find(node("PowBackward0"), 0, 0, True, stats(12.0))
    assert found is not None and found.number == 3
    assert bps.find(node("PowBackward0"), 0, 0, True, stats(1.0)) is None


def test_spec_is_plain_data():
    assert parse_spec("#3") == Spec("id", 3, "#3")


def test_module_spec_matches_the_module_and_what_it_contains():
    spec = parse_spec("module encoder.layers.*.attn")
    assert matches_node(spec, node(module="encoder.layers.3.attn"), 0, 0, False)
    assert matches_node(spec, node(module="encoder.layers.3.attn.out_proj"), 0, 0, False)
    assert not matches_node(spec, node(module="encoder.layers.3.ffn"), 0, 0, False)
    assert not matches_node(spec, node(module=None), 0, 0, False)
    fc = parse_spec("module fc")
    assert matches_node(fc, node(module="fc"), 0, 0, False)
    assert not matches_node(fc, node(module="fc2"), 0, 0, False)  # a name, not a prefix


def test_source_spec_matches_file_suffix_and_line():
    spec = parse_spec("model.py:42")
    assert matches_node(spec, node(path="/home/u/proj/model.py", line=42), 0, 0, False)
    assert not matches_node(spec, node(path="/home/u/proj/model.py", line=41), 0, 0, False)
    assert not matches_node(spec, node(path="/home/u/proj/my_model.py", line=42), 0, 0, False)
    assert not matches_node(spec, node(), 0, 0, False)
    assert matches_node(parse_spec("proj/model.py:42"), node(path="/home/u/proj/model.py", line=42), 0, 0, False)


def test_module_and_source_stop_once_per_pass():
    bps = Breakpoints()
    bp = bps.add(parse_spec("module fc2"))
    inside = node(module="fc2")
    assert bps.find(inside, 1, 0, False, ()) is bp
    assert bps.find(inside, 2, 0, False, (), fired={bp.number}) is None


def test_loss_specs_and_could_stop():
    bps = Breakpoints()
    big = bps.add(parse_spec("loss>10"))
    nan = bps.add(parse_spec("loss nan"))
    assert bps.find_loss((3.0,), False) is None
    assert bps.find_loss((None, 11.0), False) is big
    assert bps.find_loss((float("nan"),), True) is nan
    assert not bps.could_stop(0)  # loss specs are tested before the pass, not inside it
    bps.add(parse_spec("pass 4"))
    assert not bps.could_stop(3) and bps.could_stop(4)
    bps.add(parse_spec("nan"))
    assert bps.could_stop(3)


def test_a_bare_name_matches_an_op_without_the_usual_shape():
    spec = parse_spec("CopySlices")
    assert matches_node(spec, node("CopySlices"), 0, 0, False)
    assert not matches_node(spec, node("MulBackward0"), 0, 0, False)


def test_every_kind_declares_its_value_type_and_a_spec_holds_a_value_of_it():
    """Each built-in kind is `Kind[T]`: what its parser makes is a T, and a Spec of the kind with a
    value of another type (a frame built by hand) is refused where it is made, as is an unknown kind."""
    from gradtui.protocol import breakpoints as bp

    examples = {
        "op": "AddmmBackward0",
        "id": "#3",
        "nan": "nan",
        "norm": "norm>2.5",
        "pass": "pass 4",
        "loss": "loss>1",
        "lossnan": "loss nan",
        "source": "model.py:42",
        "module": "module fc*",
        "differs": "differs>0.1",
        "diverge": "diverge",
        "label": "fc.weight",
    }
    for kind in bp.KINDS:
        assert kind.value_type is not object, kind  # declared as the class's parameter
    for name, text in examples.items():
        spec = parse_spec(text)
        kind = bp.kind_of(spec)
        assert kind.name == name, (text, kind.name)
        assert isinstance(
            spec.value,
            type(None) if kind.value_type is type(None) else getattr(kind.value_type, "__origin__", kind.value_type),
        )
        assert kind.value_of(spec) == spec.value
    assert {bp.kind_of(parse_spec(text)).name for text in examples.values()} == {k.name for k in bp.KINDS}
    assert parse_spec("model.py:42").value == ("model.py", 42)
    with pytest.raises(ValueError, match="not 'big'"):
        Spec("norm", "big", "norm>big")
    with pytest.raises(ValueError):
        Spec("pass", 2.5, "pass 2.5")  # a float where the kind reads an int
    with pytest.raises(ValueError):
        Spec("source", ("model.py", "42"), "model.py:42")
    with pytest.raises(ValueError, match="no breakpoint kind"):
        Spec("frobnicate", None, "x")
