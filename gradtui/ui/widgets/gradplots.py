"""The gradients view's plots (textual-plotext and Rich): several parameters' gradient norms on
one plot, each its own colour and legend entry; one parameter's gradient distribution over passes
as TensorBoard's quantile bands; and its histogram over time, one column per pass. The x axis is
the pass or the wall time (seconds since the run started; gradtui.ui.series). What they draw is
gradtui.ui.distribution's.
"""

from __future__ import annotations

import math

from rich.style import Style
from rich.text import Text
from textual.widgets import Static
from textual_plotext import PlotextPlot

from gradtui.protocol.stats import format_number
from gradtui.ui.distribution import Band, Column, HistogramOverTime, bands, histogram_over_time
from gradtui.ui.series import PassSeries

COLORS = (
    (0, 200, 255),
    (80, 220, 80),
    (255, 220, 0),
    (230, 90, 230),
    (90, 120, 255),
    (255, 140, 60),
    (200, 200, 200),
    (0, 160, 140),
)
"""The parameters' colours on the norm plot, in the order chosen (red is kept for non-finite)."""

BAND_COLORS = ((70, 80, 110), (70, 110, 170), (100, 150, 215), (140, 195, 250), (255, 180, 60))
"""Quantile lines from the outermost pair (min and max) through the three inner pairs to the median (TensorBoard shades its
bands darker toward the median)."""

AXES = ("pass", "time")
"""The x axes: the pass index, or the wall time of the pass's start."""

TITLE_MARGIN = 12
"""Columns a title leaves: the y axis's labels and the frame."""

SHADES = " ░▒▓█"
"""A histogram cell's count, from none to the column's largest."""


def x_of(point_index: int, time: float | None, axis: str) -> float | None:
    """A point's x on `axis` (None: its time is not known)."""
    return float(point_index) if axis == "pass" else time


def pass_ticks(plt: object, xs: list[float], axis: str) -> None:
    """Whole-number ticks on the pass axis (plotext would write 9.8 for a pass)."""
    if axis == "pass" and xs:
        low, high = int(min(xs)), int(max(xs))
        step = max(1, -(-(high - low) // 5))
        plt.xticks(list(range(low, high + 1, step)))  # type: ignore[attr-defined]


def axis_label(axis: str) -> str:
    """The x axis's label."""
    return "pass" if axis == "pass" else "seconds since the run started"


class _Replotted(PlotextPlot):
    """A plot drawn again whenever it is mounted or resized (its title fits the width)."""

    def on_mount(self) -> None:
        """Draw (PlotextPlot's own mount registers the theme)."""
        super().on_mount()
        self.replot()

    def on_resize(self) -> None:
        """Draw at the new size (the title fits the width)."""
        self.replot()

    def replot(self) -> None:
        """Draw the plot; each plot says what."""
        raise NotImplementedError


class ParamsPlot(_Replotted):
    """The gradient norms of the chosen parameters (or modules) over passes, one colour each,
    with a legend; passes where one had no gradient are left out of its line."""

    def __init__(self, series: PassSeries, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id)
        self.series = series
        self.names: list[str] = []
        self.axis = "pass"
        self.title_text = ""

    def replot(self) -> None:
        """Draw the chosen parameters' lines."""
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        drawn, every = 0, []
        for at, name in enumerate(self.names):
            xs, ys = self._line(name)
            every += xs
            if xs:
                plt.plot(xs, ys, marker="braille", color=COLORS[at % len(COLORS)], label=name)
                drawn += 1
        if not self.names:
            self.title_text = "gradient norm · space on a parameter puts it here"
        else:
            self.title_text = f"gradient norm · {len(self.names)} chosen" + ("" if drawn else " · none has a norm")
        plt.title(self.title_text)
        plt.xlabel(axis_label(self.axis))
        pass_ticks(plt, every, self.axis)
        self.refresh()

    def _line(self, name: str) -> tuple[list[float], list[float]]:
        xs, ys = [], []
        for point in self.series.points:
            x, y = x_of(point.index, point.time, self.axis), self.series.norm_of(point, name)
            if x is not None and y is not None and math.isfinite(y):
                xs.append(x)
                ys.append(y)
        return xs, ys


class DistributionPlot(_Replotted):
    """One parameter's gradient distribution over passes: TensorBoard's nine quantile lines
    (gradtui.ui.distribution), the median brightest; the title says whether they are exact."""

    def __init__(self, series: PassSeries, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id)
        self.series = series
        self.subject: str | None = None
        self.axis = "pass"
        self.title_text = ""
        self.bands: list[Band] = []

    def replot(self) -> None:
        """Draw the chosen parameter's bands."""
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        self.bands = bands(self.series, self.subject) if self.subject is not None else []
        placed = [(x, b) for b in self.bands if (x := x_of(b.index, b.time, self.axis)) is not None]
        xs = [x for x, _ in placed]
        for k in range(9):
            color = BAND_COLORS[min(k, 8 - k)]
            if xs:
                plt.plot(xs, [b.quantiles[k] for _, b in placed], marker="braille", color=color)
        plt.title(self._title())
        plt.xlabel(axis_label(self.axis))
        pass_ticks(plt, xs, self.axis)
        self.refresh()

    def _title(self) -> str:
        if self.subject is None:
            text = "distribution · choose a parameter"
        elif not self.bands:
            text = f"{self.subject} · no pass has its gradient's statistics (record with --record-all)"
        else:
            exact = sum(b.exact for b in self.bands)
            how = (
                "exact quantiles"
                if exact == len(self.bands)
                else "mean ± k·std (no values kept)"
                if not exact
                else f"exact in {exact} of {len(self.bands)} passes"
            )
            last = self.bands[-1]
            forms = [
                f"{self.subject} gradient distribution · {how} · pass {last.index}: "
                f"{format_number(last.quantiles[0])}..{format_number(last.quantiles[-1])}",
                f"{self.subject} gradient distribution · {how}",
                f"{self.subject} · {how}",
                self.subject,
            ]
            room = self.size.width - TITLE_MARGIN  # plotext drops a title that overflows
            text = next((t for t in forms if len(t) <= room), forms[-1][: max(room, 1)])
        self.title_text = text
        return text


class HistogramHeat(Static):
    """One parameter's gradient histogram per pass (TensorBoard's histograms, seen from above):
    a column per pass (the latest that fit), a row per bin, highest values on top, a cell's shade
    its count against the column's largest. A pass whose values were not kept shows its range
    (`│`) and mean (`●`) only."""

    def __init__(self, series: PassSeries, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id)
        self.series = series
        self.subject: str | None = None

    def on_resize(self) -> None:
        """Draw at the new size."""
        self.replot()

    def replot(self) -> None:
        """Draw the chosen parameter's columns."""
        self.update(self.render_heat(self.size.width, self.size.height))

    def render_heat(self, width: int, height: int) -> Text:
        """The heat map as text, `width` x `height` cells (the title, the bins, the pass axis)."""
        label_width = 10
        rows = max(1, height - 3)
        if self.subject is None:
            return Text("histogram over time · choose a parameter", style="dim")
        heat = histogram_over_time(self.series, self.subject, rows)
        if not heat.columns:
            return Text(f"{self.subject} · no pass has its gradient's statistics", style="dim")
        room = max(1, width - label_width - 1)
        columns = heat.columns[-room:]
        wide = max(1, room // len(columns))  # a pass's column: as wide as the room allows
        out = Text(
            f"{self.subject} gradient histogram per pass · passes {columns[0].index}..{columns[-1].index}"
            + (" · │ range, ● mean: values not kept" if any(c.counts is None for c in columns) else "")
            + "\n",
            style="bold",
        )
        for row in reversed(range(rows)):
            edge = heat.edges[row + 1] if row == rows - 1 else (heat.edges[row] + heat.edges[row + 1]) / 2
            label = format_number(edge) if row in (rows - 1, 0) or row == rows // 2 else ""
            out.append(f"{label:>{label_width}} ", style="dim")
            for column in columns:
                mark, style = _cell(heat, column, row)
                out.append(mark * wide, style)
            out.append("\n")
        first, last = columns[0].index, columns[-1].index
        span = len(columns) * wide
        axis = f"{first}".ljust(max(1, span - len(str(last)))) + f"{last}" if len(columns) > 1 else f"{first}"
        out.append(" " * (label_width + 1) + axis + "\n", style="dim")
        out.append(" " * (label_width + 1) + "pass", style="dim")
        return out


def _cell(heat: HistogramOverTime, column: Column, row: int) -> tuple[str, Style]:
    """One cell of the heat map: a shade of its count, or a range-only pass's mark."""
    if column.counts is None:
        if heat.bin_of(column.mean) == row:
            return "●", Style(color="rgb(255,180,60)")
        if heat.bin_of(column.low) <= row <= heat.bin_of(column.high):
            return "│", Style(color="rgb(90,130,190)")
        return " ", Style()
    top = max(column.counts) or 1
    count = column.counts[row]
    if not count:
        return " ", Style()
    shade = SHADES[max(1, math.ceil(count / top * (len(SHADES) - 1)))]
    return shade, Style(color="rgb(120,170,230)")
