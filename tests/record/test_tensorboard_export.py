"""`gradtui export DB --tensorboard DIR`: the event files read back with tensorboard's own reader
(EventAccumulator) hold the recording's values, and torch's gradients where the script saved them."""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from gradtui.cli import export as export_cli
from gradtui.protocol.stats import Stats
from gradtui.record.reader import Recording
from gradtui.record.tensorboard import histogram_of
from tests.helpers import script
from tests.processes import gradtui

STEPS = 9
"""Passes of train_loop.py; its iteration 7 has a NaN input (argv "nan"), so pass 7's gradients are
non-finite and the passes after it too (SGD steps with them)."""


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[str, str, dict[str, torch.Tensor]]:
    """The seeded loop recorded per node, exported; (db, event folder, the final pass's gradients
    as torch saved them)."""
    folder = tmp_path_factory.mktemp("tb")
    db, grads, events = str(folder / "run.db"), str(folder / "grads.pt"), str(folder / "events")
    run = gradtui(
        "--headless",
        "--record-all",
        "-c",
        "continue",
        "--record",
        db,
        script("train_loop.py"),
        str(STEPS),
        grads,
        "nan",
    )
    assert run.returncode == 0, run.stderr
    done = gradtui("export", db, "--tensorboard", events)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return db, events, torch.load(grads)


def accumulator(folder: str) -> EventAccumulator:
    """tensorboard's reader over `folder`, keeping every point."""
    reader = EventAccumulator(folder, size_guidance={"scalars": 0, "histograms": 0})
    reader.Reload()
    return reader


def f32(value: float) -> float:
    """`value` as a float32 (a scalar event's simple_value is one), NaN kept."""
    return float(np.float32(value))


def same(a: float, b: float) -> bool:
    """Equal, NaN equal to NaN."""
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_scalars_are_the_recordings_per_step(made):
    db, events, _ = made
    tb = accumulator(events)
    with Recording(db) as recording:
        passes = recording.passes()
        flows = {info.index: recording.flow(info.index) for info in passes}
    assert [p.index for p in passes] == list(range(STEPS))
    loss = tb.Scalars("loss")
    assert [e.step for e in loss] == [p.index for p in passes]
    assert all(same(e.value, f32(p.losses[0])) for e, p in zip(loss, passes)), [e.value for e in loss]
    assert math.isnan(loss[7].value)  # the poisoned input's loss: NaN written and read back as NaN
    assert [e.value for e in tb.Scalars("nonfinite/global")] == [float(p.nonfinite) for p in passes]
    assert tb.Scalars("nonfinite/global")[7].value > 0
    names = [param.name for param in flows[0]]
    assert sorted(names) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    for name in names:
        grad = {e.step: e.value for e in tb.Scalars(f"grad_norm/{name}")}
        weight = {e.step: e.value for e in tb.Scalars(f"weight_norm/{name}")}
        bad = {e.step: e.value for e in tb.Scalars(f"nonfinite/{name}")}
        for index, flow in flows.items():
            param = next(p for p in flow if p.name == name)
            assert same(grad[index], f32(param.grad_norm)), (name, index)
            assert same(weight[index], f32(param.weight_norm)), (name, index)
            assert bad[index] == param.nonfinite, (name, index)
    with Recording(db) as recording:
        run_start = recording.run().started
    assert [e.wall_time for e in loss] == pytest.approx([run_start + p.started for p in passes])


def test_histograms_are_the_recorded_gradients_and_torchs(made):
    db, events, grads = made
    tb = accumulator(events)
    with Recording(db) as recording:
        passes = recording.passes()
        assert all(p.per_node for p in passes)
        for name in grads:
            points = {e.step: e.histogram_value for e in tb.Histograms(f"grad/{name}")}
            # the finite passes have a point each; a gradient with a NaN has none
            assert sorted(points) == [p.index for p in passes if p.nonfinite == 0], name
            for index, h in points.items():
                param = next(p for p in recording.flow(index) if p.name == name)
                stats = recording.stats(index)[param.node].grad_outputs[0]
                values = stats.values
                assert values is not None and h.num == len(values)
                assert (h.min, h.max) == (min(values), max(values))
                assert h.sum == pytest.approx(sum(values)) and h.sum_squares == pytest.approx(
                    sum(v * v for v in values)
                )
                limits = h.bucket_limit
                # tensorboard's buckets are closed on the right: bucket i holds (limit[i-1], limit[i]]
                for i, count in enumerate(h.bucket):
                    low = -math.inf if i == 0 else limits[i - 1]
                    assert count == sum(1 for v in values if low < v <= limits[i]), (name, index, i)
    last = STEPS - 1
    assert passes[last].nonfinite > 0  # the NaN stays: the final pass has no histogram point
    last_finite = max(p.index for p in passes if p.nonfinite == 0)
    assert last_finite == 6
    # torch as the oracle: the final pass's .grad as saved by the script, against its norm scalar
    norms = {name: {e.step: e.value for e in tb.Scalars(f"grad_norm/{name}")} for name in grads}
    for name, grad in grads.items():
        assert same(norms[name][last], f32(torch.linalg.vector_norm(grad.double()).item())), name


def test_a_big_gradient_is_one_bucket_with_its_exact_moments():
    stats = Stats((10, 10), "float32", "cpu", norm=3.0, min=-0.5, max=0.75, mean=0.01, nonfinite=0)
    h = histogram_of("grad/w", stats)
    assert h is not None
    assert (h.min, h.max, h.num, h.sum, h.sum_squares) == (-0.5, 0.75, 100.0, 1.0, 9.0)
    assert (h.bucket_limit, h.bucket) == ((0.75,), (100.0,))
    assert histogram_of("grad/w", Stats((10, 10), "float32", "cpu", 3.0, None, None, None, 0)) is None  # light


def test_without_tensorboard_it_says_how_to_get_it(made, tmp_path, capsys, monkeypatch):
    db, _, _ = made
    for name in [n for n in sys.modules if n == "tensorboard" or n.startswith("tensorboard.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # `import tensorboard...` raises ImportError
    assert export_cli.main([db, "--tensorboard", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "pip install 'gradtui[tensorboard]'" in err, err
    assert not os.path.exists(tmp_path / "out")


def test_a_file_in_the_way_is_one_line(made, tmp_path, capsys):
    db, _, _ = made
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert export_cli.main([db, "--tensorboard", str(blocker)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gradtui export: cannot write --tensorboard ") and len(err.strip().splitlines()) == 1


def test_one_parameters_recorded_gradients_for_the_distributions(made):
    from gradtui.ui.distribution import bands
    from gradtui.ui.series import PassSeries

    db, _, _ = made
    with Recording(db) as recording:
        figures = recording.figures(512)
        passes = recording.passes()
        assert [f.started for f in figures] == [info.started for info in passes]
        found = recording.param_stats("0.weight", [f.index for f in figures])
        for info in passes:
            param = next(p for p in recording.flow(info.index) if p.name == "0.weight")
            wanted = recording.stats(info.index)[param.node].grad_outputs[0]
            assert repr(found[info.index]) == repr(wanted)  # repr: a NaN pass's statistics equal NaN to NaN
        assert recording.param_stats("0.weight", [0, 2]).keys() == {0, 2}
        assert recording.param_stats("no.such", [0, 1]) == {}
    series = PassSeries()
    series.load(figures)
    assert bands(series, "0.weight") == []  # not read yet
    series.add_stats("0.weight", found)
    assert [b.index for b in bands(series, "0.weight")] == [p.index for p in passes if p.nonfinite == 0]


def test_tensorboards_own_ui_pipeline_reads_them_as_scalars_and_histograms(made):
    """What the TensorBoard web UI reads through (the plugin accumulator: summaries migrated to
    its plugins' tensors) sees the loss as a scalar and the gradients as histograms."""
    from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator as PluginAccumulator
    from tensorboard.util import tensor_util

    db, events, _ = made
    reader = PluginAccumulator(events, size_guidance={"tensors": 0})
    reader.Reload()
    assert reader.SummaryMetadata("loss").plugin_data.plugin_name == "scalars"
    assert reader.SummaryMetadata("grad/0.weight").plugin_data.plugin_name == "histograms"
    first = tensor_util.make_ndarray(reader.Tensors("grad/0.weight")[0].tensor_proto)  # rows: left, right, count
    with Recording(db) as recording:
        param = next(p for p in recording.flow(0) if p.name == "0.weight")
        values = recording.stats(0)[param.node].grad_outputs[0].values
    assert first[:, 2].sum() == len(values) and first[-1, 1] == max(values)
