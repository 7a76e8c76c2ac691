"""The gradients view (the passes view's `g`): several parameters' norms on one plot, and a
parameter's gradient distribution over passes (TensorBoard's quantile bands and histogram over
time), with a pass or wall-time axis. torch is the oracle of the quantiles and the bins."""

from __future__ import annotations

import random

import pytest
import torch
from textual.app import App
from textual.widgets import SelectionList

from gradtui.engine.stats.summary import summarize
from gradtui.protocol import events as ev
from gradtui.ui.distribution import BASIS_POINTS, bands, histogram_over_time, quantiles_of, std_of
from gradtui.ui.screens.gradients import GradientsScreen
from gradtui.ui.series import PassSeries
from gradtui.ui.widgets.gradplots import DistributionPlot, HistogramHeat, ParamsPlot

pytestmark = pytest.mark.timeout(120)

SIZE = (140, 40)


def seeded_series(passes: int = 40) -> PassSeries:
    """A run's series built by hand from seeded gradients (a small one whose values are kept, a
    big one with moments only, a bias), its clock fixed: the same every time."""
    rng = random.Random(0)
    series, now = PassSeries(), [0.0]
    series.clock = lambda: now[0]
    for i in range(passes):
        now[0] = i * 0.5 + (i // 10) * 3.0  # a pause every ten passes: the time axis is not the pass axis
        series.started(i, (1.0 / (i + 1),))
        small = summarize(torch.tensor([rng.gauss(0, 1.0 / (1 + i * 0.1)) for _ in range(48)]))
        big = summarize(torch.tensor([rng.gauss(0.1, 0.5) for _ in range(200)]))
        flow = (
            ev.ParamFlow("fc1.weight", 1, (48,), small.norm, 3.0, 0.1, 0),
            ev.ParamFlow("fc2.weight", 2, (200,), big.norm, 2.0, 0.1, 0),
            ev.ParamFlow("fc2.bias", 3, (1,), 0.3 + 0.01 * i, 1.0, 0.3, 0),
        )
        series.finished(i, flow, ((1, small), (2, big)))
    return series


class GradientsApp(App):
    """The gradients view alone over the seeded series."""

    def __init__(self, chosen: list[str]) -> None:
        super().__init__()
        self.chosen = chosen

    def on_mount(self) -> None:
        self.push_screen(GradientsScreen(seeded_series(), self.chosen))


def test_exact_quantiles_are_torchs_and_moments_give_the_std():
    values = torch.randn(50, generator=torch.Generator().manual_seed(1))
    quantiles, exact = quantiles_of(summarize(values))
    expected = torch.quantile(values.double(), torch.tensor([bp / 10000 for bp in BASIS_POINTS], dtype=torch.double))
    assert exact and torch.allclose(torch.tensor(quantiles, dtype=torch.double), expected, rtol=0, atol=1e-12)
    big = torch.randn(1000, generator=torch.Generator().manual_seed(2)) * 3 + 1
    stats = summarize(big)
    assert stats.values is None  # past 64 elements gradtui keeps moments only
    assert std_of(stats) == pytest.approx(big.double().std(correction=0).item(), rel=1e-5)
    quantiles, exact = quantiles_of(stats)
    assert not exact and quantiles[0] == stats.min and quantiles[-1] == stats.max
    assert quantiles[4] == pytest.approx(stats.mean) and list(quantiles) == sorted(quantiles)


def test_the_series_keeps_each_parameters_gradient_and_the_bands_follow_it():
    series = seeded_series(5)
    found = bands(series, "fc1.weight")
    assert [b.index for b in found] == list(range(5)) and all(b.exact for b in found)
    assert [b.time for b in found] == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert not any(b.exact for b in bands(series, "fc2.weight"))
    assert bands(series, "fc2.bias") == []  # no statistics came for it: no band, not a made-up one
    light = PassSeries()  # light statistics (a pass between pauses): norm only, no band
    light.started(0, (1.0,))
    light.finished(0, (ev.ParamFlow("w", 1, (100,), 2.0, 1.0, 2.0, 0),), ((1, summarize(torch.ones(100), light=True)),))
    assert bands(light, "w") == [] and light.norm_of(light.points[0], "w") == 2.0


def test_histogram_over_time_bins_are_torchs():
    series = seeded_series(6)
    heat = histogram_over_time(series, "fc1.weight", 12)
    low, high = heat.edges[0], heat.edges[-1]
    for point, column in zip(series.points, heat.columns):
        values = torch.tensor(series.stats_of(point, "fc1.weight").values, dtype=torch.double)
        assert column.counts == tuple(int(c) for c in torch.histc(values, bins=12, min=low, max=high))
    big = histogram_over_time(series, "fc2.weight", 12)
    assert all(c.counts is None for c in big.columns)  # values not kept: range and mean only


def test_snapshot_two_parameters_on_one_plot_and_a_distribution(snap_compare):
    assert snap_compare(GradientsApp(["fc1.weight", "fc2.weight"]), terminal_size=SIZE)


def test_snapshot_histogram_over_time_on_the_wall_time_axis(snap_compare):
    async def run_before(pilot):
        await pilot.press("w", "h")
        await pilot.pause()

    assert snap_compare(GradientsApp(["fc1.weight"]), terminal_size=SIZE, run_before=run_before)


@pytest.mark.asyncio
async def test_space_adds_a_parameter_to_the_plot_and_the_cursor_picks_the_distribution():
    app = GradientsApp(["fc1.weight"])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, GradientsScreen)
        norms, dist = screen.query_one(ParamsPlot), screen.query_one(DistributionPlot)
        assert norms.names == ["fc1.weight"] and dist.subject == "fc1.weight"
        await pilot.press("down")
        await pilot.pause()
        assert dist.subject == "fc2.weight" and "mean ± k·std" in dist.title_text
        await pilot.press("space")
        await pilot.pause()
        assert norms.names == ["fc1.weight", "fc2.weight"]
        assert screen.query_one(SelectionList).selected == ["fc1.weight", "fc2.weight"]
        await pilot.press("space")
        await pilot.pause()
        assert norms.names == ["fc1.weight"]
        await pilot.press("h")
        await pilot.pause()
        heat = screen.query_one(HistogramHeat)
        assert heat.display and not dist.display and heat.subject == "fc2.weight"


@pytest.mark.asyncio
async def test_g_in_a_replays_passes_view_draws_the_recorded_distributions(tmp_path):
    """`gradtui replay DB`, P, g: the recording's per-node passes give each parameter its bands."""
    from gradtui.record.reader import Recording
    from gradtui.record.replay import ReplayTarget
    from gradtui.ui.app import GradtuiApp
    from gradtui.ui.screens.passes import PassesScreen
    from tests.helpers import script, wait_for
    from tests.processes import gradtui

    db = str(tmp_path / "run.db")
    run = gradtui("--headless", "--record-all", "-c", "continue", "--record", db, script("train_loop.py"), "5")
    assert run.returncode == 0, run.stderr
    with Recording(db) as recording:
        weights = {
            info.index: recording.stats(info.index)[
                next(p.node for p in recording.flow(info.index) if p.name == "0.weight")
            ].grad_outputs[0]
            for info in recording.passes()
        }
    app = GradtuiApp(target=ReplayTarget(db), passes_first=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(
            pilot, lambda: isinstance(app.screen, PassesScreen) and app.screen.indices, what="the passes view"
        )
        await pilot.press("g")
        await wait_for(pilot, lambda: isinstance(app.screen, GradientsScreen), what="the gradients view")
        listing = app.screen.query_one(SelectionList)
        values = [listing.get_option_at_index(i).value for i in range(listing.option_count)]
        listing.highlighted = values.index("0.weight")
        dist = app.screen.query_one(DistributionPlot)
        await wait_for(pilot, lambda: dist.subject == "0.weight", what="0.weight's distribution")
        assert [b.index for b in dist.bands] == sorted(weights)
        for band in dist.bands:  # the recorded values' own quantiles (64 elements: kept, so exact)
            ordered = torch.tensor(sorted(weights[band.index].values), dtype=torch.double)
            assert band.exact and band.quantiles[0] == ordered[0].item() and band.quantiles[-1] == ordered[-1].item()
            assert band.quantiles[4] == pytest.approx(torch.quantile(ordered, 0.5).item())
        assert all(b.time is not None for b in dist.bands)  # the wall-time axis has every pass


def test_a_live_run_keeps_the_statistics_of_its_last_passes_only():
    from gradtui.ui.series import GRAD_POINTS

    series = PassSeries(limit=4 * GRAD_POINTS)
    stats = summarize(torch.arange(8.0))
    for i in range(GRAD_POINTS + 10):
        series.started(i, (1.0,))
        series.finished(i, (ev.ParamFlow("w", 1, (8,), stats.norm, 1.0, 1.0, 0),), ((1, stats),))
    kept = [p.index for p in series.points if series.stats_of(p, "w") is not None]
    assert kept == list(range(10, GRAD_POINTS + 10))
    assert all(series.norm_of(p, "w") == stats.norm for p in series.points)  # the norms stay


def test_a_modules_distribution_is_its_parameters_elements_together():
    series = seeded_series(3)
    assert all(series.stats_of(point, "fc2.bias") is None for point in series.points)
    assert bands(series, "fc2") == []  # one of fc2's parameters has no statistics: no band, not a partial one
    both = PassSeries()
    a, b = (
        torch.randn(10, generator=torch.Generator().manual_seed(3)),
        torch.randn(6, generator=torch.Generator().manual_seed(4)),
    )
    both.started(0, (1.0,))
    both.finished(
        0,
        (ev.ParamFlow("m.weight", 1, (10,), 1.0, 1.0, 1.0, 0), ev.ParamFlow("m.bias", 2, (6,), 1.0, 1.0, 1.0, 0)),
        ((1, summarize(a)), (2, summarize(b))),
    )
    (band,) = bands(both, "m")
    together = torch.cat([a, b]).double()
    expected = torch.quantile(together, torch.tensor([bp / 10000 for bp in BASIS_POINTS], dtype=torch.double))
    assert band.exact and torch.allclose(torch.tensor(band.quantiles, dtype=torch.double), expected, atol=1e-6)
