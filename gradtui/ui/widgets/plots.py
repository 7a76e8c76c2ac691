"""The passes view's plots (textual-plotext): loss, global gradient norm, non-finite count and
per-module gradient norm over passes, drawn from `UIState.series` (`gradtui.ui.series`).

A live run shows the loss and the gradient norm of the passes so far; a recording all four. A
plot redraws only when the series changed since it last drew. Non-finite values cannot be
drawn: a pass where the gradient norm is not finite is a red vertical line on the norm plot,
and the non-finite plot counts its leaves.
"""

from __future__ import annotations

import math

from textual.app import ComposeResult
from textual.containers import Grid
from textual_plotext import PlotextPlot

from gradtui.ui.series import PassSeries

MODULE_LINES = 5
"""Modules drawn on the per-module plot: those with the largest gradient norm."""

LIVE_FIGURES = ("loss", "norm")
RECORDING_FIGURES = ("loss", "norm", "nonfinite", "modules")

TITLES = {"loss": "loss", "norm": "gradient norm (all parameters)", "nonfinite": "non-finite gradients (leaves)",
          "modules": "gradient norm per module"}


def _finite(xs: list[int], ys: list[float | None]) -> tuple[list[int], list[float]]:
    kept = [(x, y) for x, y in zip(xs, ys) if y is not None and math.isfinite(y)]
    return [x for x, _ in kept], [y for _, y in kept]


class SeriesPlot(PlotextPlot):
    """One figure of the series (see module doc)."""

    def __init__(self, series: PassSeries, figure: str, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id, classes="series-plot")
        self.series = series
        self.figure = figure
        self._drawn = -1

    def on_mount(self) -> None:
        """Draw the figure (PlotextPlot's own mount registers the theme)."""
        super().on_mount()
        self.replot()

    def replot(self) -> None:
        """Set the plot's data from the series, if it changed."""
        if self._drawn == self.series.version:
            return
        self._drawn = self.series.version
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        points = self.series.points
        every = max(1, len(points) // (2 * max(self.size.width, 40)))  # plotext's cost is per point: two a column
        if every > 1:
            points = [p for i, p in enumerate(points) if i % every == 0 or p.nonfinite or i == len(points) - 1]
        xs = [p.index for p in points]
        plt.title(TITLES[self.figure] if points else f"{TITLES[self.figure]} · no pass has ended yet")
        plt.xlabel("pass")
        match self.figure:
            case "loss":
                x, y = _finite(xs, [p.loss for p in points])
                if x:
                    plt.plot(x, y, marker="braille", color="cyan")
            case "norm":
                x, y = _finite(xs, [p.grad_norm for p in points])
                if x:
                    plt.plot(x, y, marker="braille", color="green")
                for p in points:
                    if p.grad_norm is not None and not math.isfinite(p.grad_norm):
                        plt.vline(p.index, "red")
            case "nonfinite":
                bad = [p for p in points if p.nonfinite]
                if bad:  # bars, not a line: a NaN at one pass is not a ramp over its neighbours
                    plt.bar([p.index for p in bad], [p.nonfinite for p in bad], color="red", width=0.2)
                if xs:
                    plt.xlim(xs[0] - 0.5, xs[-1] + 0.5)
                    plt.ylim(0, max([p.nonfinite for p in bad], default=0) + 1)
            case "modules":
                colors = ("cyan", "green", "yellow", "magenta", "blue")
                for module, color in zip(self.series.top_modules(MODULE_LINES), colors):
                    x, y = _finite(xs, [p.modules.get(module) for p in points])
                    if x:
                        plt.plot(x, y, marker="braille", color=color, label=module)
        if xs:
            step = max(1, math.ceil((xs[-1] - xs[0]) / 5))
            plt.xticks(list(range(xs[0], xs[-1] + 1, step)))  # passes are whole numbers
        self.refresh()


class PassPlots(Grid):
    """The plots of the passes view: two side by side (live), or four in a 2x2 grid (a recording)."""

    def __init__(self, series: PassSeries, recording: bool) -> None:
        super().__init__(id="passes-plots", classes="recording" if recording else "live")
        self.series = series
        self.figures = RECORDING_FIGURES if recording else LIVE_FIGURES

    def compose(self) -> ComposeResult:
        """One SeriesPlot per figure."""
        for figure in self.figures:
            yield SeriesPlot(self.series, figure, id=f"plot-{figure}")

    def replot(self) -> None:
        """Redraw every plot whose data changed."""
        for plot in self.query(SeriesPlot):
            plot.replot()
