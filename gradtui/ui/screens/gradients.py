"""The gradients view (`g` in the passes view): what a TensorBoard user looks at first.

Left, every parameter and module of the run (gradtui.ui.series' choices); space (or a click)
puts one on the norm plot above, each in its own colour with a legend entry, as many as wanted.
The row under the cursor is the one whose gradient distribution over passes shows below:
TensorBoard's quantile bands, or (`h`) its histogram over time. `w` switches the x axis between
the pass and the wall time. A module's distribution is that of its parameters' gradients
together (gradtui.ui.distribution). A live run's series has each
parameter's gradient statistics already; a recording's are read for one parameter when its
distribution is first shown (all of them at once made a replay of a big model slow to open).
"""

from __future__ import annotations

from collections.abc import Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, SelectionList
from textual.widgets.selection_list import Selection

from gradtui.protocol.stats import Stats
from gradtui.ui.distribution import members
from gradtui.ui.series import PassSeries
from gradtui.ui.widgets.gradplots import AXES, DistributionPlot, HistogramHeat, ParamsPlot

StatsReader = Callable[[str, list[int]], dict[int, Stats]]
"""Reads a parameter's gradient statistics in the given passes: pass index -> Stats."""


class GradientsScreen(Screen[None]):
    """Several parameters' norms on one plot, and one parameter's distribution over passes."""

    DEFAULT_CSS = """
    #gradients { height: 1fr; }
    #gradients-list { width: 30; max-width: 40%; height: 1fr; border: round $primary; }
    #gradients-plots { width: 1fr; height: 1fr; }
    #gradients-norms, #gradients-bands, #gradients-heat { height: 1fr; }
    """

    BINDINGS = [
        Binding("escape,q,g", "close", "close"),
        Binding("w", "axis", "pass/wall time"),
        Binding("h", "histogram", "bands/histogram"),
    ]

    def __init__(
        self, series: PassSeries, chosen: list[str] | None = None, param_stats: StatsReader | None = None
    ) -> None:
        """`chosen`: the parameters or modules on the norm plot at first (the first one's
        distribution shows); `param_stats`: reads a recording's gradient statistics of a
        parameter over passes, once, when its distribution is first shown (a live run's series
        has them already)."""
        super().__init__()
        self.series = series
        self.param_stats = param_stats
        self._read: set[str] = set()
        """The parameters whose statistics `param_stats` has read."""
        self.chosen = [name for name in (chosen or []) if name in series.choices()]
        self.axis = "pass"
        self.heat = False
        """True: the histogram over time instead of the quantile bands."""

    def compose(self) -> ComposeResult:
        """The list beside the two plots."""
        with Horizontal(id="gradients"):
            names = self.series.choices()
            params = [name for name in names if name in self.series.names]
            listing = SelectionList[str](
                *(Selection(name, name, name in self.chosen) for name in params),
                *(
                    Selection(f"{name} (module)", name, name in self.chosen)
                    for name in names
                    if name not in self.series.names
                ),
                id="gradients-list",
            )
            listing.border_title = "parameters · space: plot"
            yield listing
            with Vertical(id="gradients-plots"):
                yield ParamsPlot(self.series, id="gradients-norms")
                yield DistributionPlot(self.series, id="gradients-bands")
                yield HistogramHeat(self.series, id="gradients-heat")
        yield Footer()

    def on_mount(self) -> None:
        """The first chosen parameter under the cursor, the plots drawn."""
        listing = self.query_one(SelectionList)
        values = [listing.get_option_at_index(i).value for i in range(listing.option_count)]
        first = self.chosen[0] if self.chosen else (values[0] if values else None)
        if first is not None:
            listing.highlighted = values.index(first)
        self.query_one(HistogramHeat).display = False
        listing.focus()
        self._show(first)

    def on_selection_list_selection_toggled(self, event: SelectionList.SelectionToggled) -> None:
        """Space on a row: on the norm plot, or off it."""
        event.stop()
        name = event.selection.value
        if name in self.chosen:
            self.chosen.remove(name)
        else:
            self.chosen.append(name)
        plot = self.query_one(ParamsPlot)
        plot.names = list(self.chosen)
        plot.replot()

    def on_selection_list_selection_highlighted(self, event: SelectionList.SelectionHighlighted) -> None:
        """The row under the cursor: its distribution below."""
        event.stop()
        self._show(event.selection.value)

    def _show(self, name: str | None) -> None:
        if name is not None and self.param_stats is not None:
            for param in members(self.series, name):  # a module's: each of its parameters'
                if param not in self._read:
                    self._read.add(param)
                    self.series.add_stats(param, self.param_stats(param, [p.index for p in self.series.points]))
        norms = self.query_one(ParamsPlot)
        norms.names, norms.axis = list(self.chosen), self.axis
        norms.replot()
        bands = self.query_one(DistributionPlot)
        bands.subject, bands.axis = name, self.axis
        bands.replot()
        heat = self.query_one(HistogramHeat)
        heat.subject = name
        heat.replot()

    def action_axis(self) -> None:
        """`w`: the x axis is the pass, or the wall time."""
        self.axis = AXES[(AXES.index(self.axis) + 1) % len(AXES)]
        self._show(self.query_one(DistributionPlot).subject)

    def action_histogram(self) -> None:
        """`h`: the histogram over time instead of the quantile bands, or back."""
        self.heat = not self.heat
        self.query_one(DistributionPlot).display = not self.heat
        self.query_one(HistogramHeat).display = self.heat
        self.query_one(HistogramHeat).replot()

    def action_close(self) -> None:
        """Back to the passes view."""
        self.dismiss(None)
