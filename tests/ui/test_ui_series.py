"""The plots' data (`gradtui.ui.series`): per-pass loss, global and per-module gradient norms
from the flow, bounded memory that never drops a non-finite pass, a pass shown again replacing
its point. Hand-made events, no Textual."""

from __future__ import annotations

import math

from gradtui.protocol import events as ev
from gradtui.ui.series import TOP, PassSeries, module_of
from gradtui.ui.state import UIState
from tests.helpers import started, stats


def flow(*rows: tuple[str, float | None, int]) -> tuple[ev.ParamFlow, ...]:
    return tuple(ev.ParamFlow(name, None, (1,), norm, 1.0, norm, bad) for name, norm, bad in rows)


def test_a_point_is_the_loss_and_the_norms_of_the_flow():
    series = PassSeries()
    series.started(0, (None, 2.5))
    series.finished(0, flow(("fc1.weight", 3.0, 0), ("fc1.bias", 4.0, 0), ("fc2.weight", 12.0, 0), ("w", None, 0)))
    [point] = series.points
    assert (point.index, point.loss, point.grad_norm, point.nonfinite) == (0, 2.5, 13.0, 0)
    assert point.modules == {"fc1": 5.0, "fc2": 12.0}
    assert module_of("w") == TOP and module_of("enc.layers.0.linear1.weight") == "enc.layers.0.linear1"
    series.finished(1, flow(("fc1.weight", float("nan"), 4)))
    assert (
        series.points[1].loss is None and math.isnan(series.points[1].grad_norm) and series.points[1].nonfinite == 1
    )  # leaves, not elements
    assert series.top_modules(5) == ["fc2", "fc1"]


def test_thinning_keeps_bounded_points_and_every_non_finite_pass():
    series = PassSeries(limit=100)
    for i in range(1000):
        series.finished(i, flow(("a.w", float("inf") if i == 333 else 1.0, int(i == 333))))
    indexes = [p.index for p in series.points]
    assert len(indexes) <= 100 + 1 and indexes == sorted(indexes)
    assert 333 in indexes and indexes[-1] == 999 and indexes[0] == 0


def test_the_ui_state_feeds_the_series_and_a_pass_shown_again_replaces_its_point():
    state = UIState("train.py")
    for i, loss in enumerate((3.0, 2.0, 1.0)):
        state.apply(started(i, losses=(loss,), recorded=False))
        state.apply(ev.PassFinished(i, 0, 0, flow=flow(("fc.weight", loss * 2, 0))))
    assert [(p.index, p.loss, p.grad_norm) for p in state.series.points] == [
        (0, 3.0, 6.0),
        (1, 2.0, 4.0),
        (2, 1.0, 2.0),
    ]
    version = state.series.version
    state.apply(started(1, losses=(2.0,), recorded=False))  # a recording's `pass 1`
    state.apply(ev.PassFinished(1, 0, 0, flow=flow(("fc.weight", 4.0, 0))))
    assert [p.index for p in state.series.points] == [0, 1, 2] and state.series.version > version


def test_a_hooked_pass_whose_flow_nothing_showed_has_its_norms_from_its_leaves_statistics():
    """The agent computes a hooked pass's flow only for a client that shows it: the series still
    plots the pass, from the leaves' gradient statistics named as the flow would name them, and
    `w` says its flow was not measured (not that no leaf had a gradient)."""
    state = UIState("train.py")
    state.apply(started(0, losses=(2.0,)))
    leaf_grads = ((2, stats(3.0)), (6, stats(4.0)), (7, stats(12.0)), (9, stats(float("nan"), nonfinite=2)))
    state.apply(ev.PassFinished(0, 10, 10, leaf_grads=leaf_grads))
    [point] = state.series.points
    assert point.loss == 2.0 and math.isnan(point.grad_norm) and point.nonfinite == 1
    assert point.modules["fc2"] == 5.0 and point.modules["fc1"] != point.modules["fc1"]  # NaN: fc1.weight's
    assert [state.series.names[n] for n in ("fc2.bias", "fc2.weight", "fc1.bias", "fc1.weight")] == [0, 1, 2, 3]
    assert [s.norm for s in point.grads[:3]] == [3.0, 4.0, 12.0]
    shown, _ = state.flow_to_show()
    assert shown is not None and not shown.measured and shown.flow == ()

    state.apply(started(1, losses=(1.0,)))
    state.apply(ev.PassFinished(1, 10, 10))  # no leaf received a gradient: measured, and empty
    shown, _ = state.flow_to_show()
    assert shown is not None and shown.index == 1 and shown.measured and state.series.points[1].grad_norm is None
