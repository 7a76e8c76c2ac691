"""Gradients with no storage to read: a ZeroTensor (all zeros by definition,
`.tolist()` refuses it) has the statistics of zeros; meta and fake tensors have none, and say so.
Through a live session, every path (statistics, preview, histogram, edits, print, report) runs
over them and the leaf gradients stay a plain run's."""

from __future__ import annotations

import json

import pytest
import torch

from gradtui.engine import edits
from gradtui.engine.stats.summary import CHUNK, describe, summarize
from gradtui.protocol import events as ev
from gradtui.protocol.stats import VALUES_LIMIT, format_stats
from tests.helpers import run_headless, run_plain, script

pytestmark = pytest.mark.timeout(120)


def zerotensor(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    t = torch._efficientzerotensor(shape, dtype=dtype)
    assert t._is_zerotensor()
    with pytest.raises(RuntimeError):
        t.tolist()  # what broke the pass: no storage
    return t


@pytest.mark.parametrize("shape", [(3,), (8, 8), (VALUES_LIMIT + 1,), (5, 100), (CHUNK + 7,)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.complex64])
@pytest.mark.parametrize(("histogram", "light"), [(False, False), (True, False), (False, True)])
def test_a_zerotensor_has_the_statistics_of_zeros(shape, dtype, histogram, light):
    got = summarize(zerotensor(*shape, dtype=dtype), histogram=histogram, light=light)
    assert got == summarize(torch.zeros(shape, dtype=dtype), histogram=histogram, light=light)
    assert got.unreadable is None


def test_a_zerotensor_in_print_and_in_edits():
    z = zerotensor(4)
    assert "norm 0  min 0  max 0  mean 0  values [0, 0, 0, 0]" in describe(z)
    assert "norm 0" in describe((z, torch.ones(2)))
    assert torch.equal(edits.scale((z,), 3.0)[0], torch.zeros(4))
    assert torch.equal(edits.zero((z,))[0], torch.zeros(4))
    assert torch.equal(edits.clip((z,), 1.0)[0], torch.zeros(4))
    assert torch.equal(edits.replace((z,), "g + 1")[0], torch.ones(4))


def test_a_meta_tensor_says_it_has_no_values():
    s = summarize(torch.ones(2, 3, device="meta"), histogram=True)
    assert (s.shape, s.dtype, s.device) == ((2, 3), "float32", "meta")
    assert s.unreadable == "a meta tensor has no values"
    assert s.min is None and s.nonfinite == 0 and s.values is None
    assert format_stats(s) == "[2, 3] float32 meta  no values: a meta tensor has no values"
    out = json.loads(json.dumps(s.to_json()))
    assert out["norm"] is None and out["unreadable"] == "a meta tensor has no values"
    assert s.reshaped((6,)).unreadable == s.unreadable


def test_a_fake_tensor_says_it_has_no_values():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.ones(5)
    s = summarize(fake)
    assert s.unreadable == "a fake tensor has no values"
    assert s.device == "cpu" and s.shape == (5,)
    assert "no values" in describe(fake)


# ---- through a session ---------------------------------------------------------------------


def _plain_and_debugged(name: str, commands: list[str], tmp_path) -> tuple[dict, dict, object]:
    plain, debugged = tmp_path / "plain.pt", tmp_path / "debugged.pt"
    run_plain(script(name), [str(plain)])
    run = run_headless(script(name), commands, [str(debugged)])
    return torch.load(plain), torch.load(debugged), run


def _assert_same(expected: dict, actual: dict) -> None:
    assert sorted(expected) == sorted(actual)
    for key, want in expected.items():
        assert torch.equal(want, actual[key]), key


STEP_ALL = ["step", "print", "print g", "print g * 2", "scale 1"] * 40


@pytest.mark.parametrize("commands", [["continue"], STEP_ALL], ids=["continue", "step"])
def test_sgn_times_x_runs_through_and_matches_plain(commands, tmp_path):
    expected, actual, run = _plain_and_debugged("zerotensor.py", commands, tmp_path)
    assert run.status == 0, run.output
    assert all(f.error is None for f in run.of(ev.PassFinished)), run.output
    _assert_same(expected, actual)
    assert not [r for r in run.results() if not r.ok], [r.text for r in run.results() if not r.ok]
    report = json.loads(json.dumps(run.report.to_json()))  # the report is valid JSON
    sgn = [n for p in report["passes"] for n in p["nodes"] if n["name"] == "SgnBackward0"]
    assert sgn and all(n["grad_inputs"][0]["values"] == [0.0, 0.0, 0.0] for n in sgn)


def test_a_zerotensor_at_a_pause_is_previewed_printed_and_edited(tmp_path):
    """Stop where the ZeroTensor arrives (AccumulateGrad of x at double backward of abs, pass 2)."""
    commands = ["break pass 2", "continue"] + ["step"] * 3 + ["print", "print g", "set g + 1", "continue"]
    run = run_headless(script("zerotensor.py"), commands, [str(tmp_path / "g.pt")])
    assert run.status == 0, run.output
    (paused,) = [p for p in run.pauses if "AccumulateGrad" in p.name and p.pass_index == 2]
    (grad,) = paused.grads
    assert grad.values == (0.0, 0.0, 0.0) and grad.histogram is not None and sum(grad.histogram) == 3
    (edit,) = run.of(ev.GradEdited)
    assert edit.after[0].values == (1.0, 1.0, 1.0)
    assert torch.equal(torch.load(tmp_path / "g.pt")["abs"], torch.ones(3))
