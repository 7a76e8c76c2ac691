"""The passes view's plots (textual-plotext): loss, global gradient norm, non-finite count and
per-module gradient norm over passes, drawn from `UIState.series` (`gradtui.ui.series`).

A live run shows the loss and the gradient norm of the passes so far; a recording all four. A
plot redraws only when the series, the scale or the cursor changed since it last drew.
Non-finite values cannot be drawn: a pass with a non-finite loss or gradient is a red vertical
line on the loss and norm plots (their titles count them: the line does not just stop there),
and the non-finite plot counts its leaves. `log` draws the loss and norms on a log scale
(values <= 0 left out); `cursor` is a pass: an amber line there, its value in the title.
`smoothing` (TensorBoard's: a debiased moving average of that weight, 0 for none) draws the
loss and norms smoothed over their raw values, dimmed; `chosen` puts one module's or
parameter's gradient norm on the norm plot instead of all the parameters'. `in_flight` is the
pass in flight, which the series has no point of yet: its loss (known when it starts) is on the
loss plot, and the cursor on it says what is true of the others (its norms come when it ends).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from textual.app import ComposeResult
from textual.containers import Grid
from textual_plotext import PlotextPlot

from gradtui.protocol.stats import format_number
from gradtui.ui.series import PassSeries, SeriesPoint, ema, point_at

MODULE_LINES = 5
"""Modules drawn on the per-module plot: those with the largest gradient norm."""

LIVE_FIGURES = ("loss", "norm")
RECORDING_FIGURES = ("loss", "norm", "nonfinite", "modules")

TITLES = {
    "loss": "loss",
    "norm": "gradient norm (all parameters)",
    "nonfinite": "non-finite gradients (leaves)",
    "modules": "gradient norm per module",
}

SHORT_TITLES = {"loss": "loss", "norm": "grad norm", "nonfinite": "non-finite", "modules": "modules"}
"""The names a title falls back to when the long one leaves no room for its count and cursor."""

CURSOR_COLOR = (255, 200, 0)
"""The cursor's line: an amber no line of the figures has."""

TITLE_MARGIN = 12
"""Columns a title leaves: the y axis's labels (up to ~10) and the frame."""

LOG_FIGURES = ("loss", "norm", "modules")
"""Figures the log scale applies to (the non-finite counts are bars from zero)."""

RAW_COLOR = (90, 90, 90)
"""The raw values under a smoothed line: dim, as TensorBoard draws them."""

SMOOTHING_STEPS = (0.0, 0.6, 0.9, 0.99)
"""The smoothing weights `s` in the passes view steps through (TensorBoard's slider, in four)."""


class Running(NamedTuple):
    """The pass in flight: its index and its (first root's) loss, None if it has no single value."""

    index: int  # type: ignore[assignment]  # a NamedTuple field named as tuple's method index
    loss: float | None


def _finite(xs: list[int], ys: list[float | None], log: bool = False) -> tuple[list[int], list[float]]:
    kept = [(x, y) for x, y in zip(xs, ys) if y is not None and math.isfinite(y) and (y > 0 or not log)]
    return [x for x, _ in kept], [y for _, y in kept]


def _around(value: float, log: bool) -> tuple[float, float]:
    """The y range an axis spreads over one value: a factor 2 each way on a log scale, half
    the value each way (1 around 0) on a linear one, as plotext does for a lone point."""
    if log:  # plotext takes a log axis's limits as exponents
        return math.log10(value / 2), math.log10(value * 2)
    pad = abs(value) / 2 or 1.0
    return value - pad, value + pad


def is_nonfinite(point: SeriesPoint) -> bool:
    """Whether a pass's loss or any of its gradients was not finite."""
    return bool(point.nonfinite) or any(v is not None and not math.isfinite(v) for v in (point.loss, point.grad_norm))


class SeriesPlot(PlotextPlot):
    """One figure of the series (see module doc); `log` and `cursor` are set by PassPlots."""

    def __init__(self, series: PassSeries, figure: str, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id, classes="series-plot")
        self.series = series
        self.figure = figure
        self.log_scale = False
        self.cursor: int | None = None
        self.smoothing = 0.0
        self.chosen: str | None = None
        self.in_flight: Running | None = None
        self.title_text = ""
        """The title as last drawn (what the figure says about its passes and the cursor)."""
        self._drawn: tuple[int, bool, int | None, float, str | None, Running | None] | None = None
        self._lines = 0
        """Lines the last draw put on the figure (a log scale needs one)."""
        self._span: tuple[float, float] | None = None
        """The lowest and highest value the last draw's lines put on the figure."""

    @property
    def drawn_version(self) -> int | None:
        """The series version the figure last drew (None before its first draw): a bench or a
        test knows from it that the plot shows what the series holds."""
        return self._drawn[0] if self._drawn is not None else None

    def on_mount(self) -> None:
        """Draw the figure (PlotextPlot's own mount registers the theme)."""
        super().on_mount()
        self.replot()

    def on_resize(self) -> None:
        """Fit the title to the new width (a name gives way to the count and the cursor)."""
        self._drawn = None
        self.replot()

    def replot(self) -> None:
        """Set the plot's data from the series, if it, the scale or the cursor changed."""
        drawn = (self.series.version, self.log_scale, self.cursor, self.smoothing, self.chosen, self.in_flight)
        if self._drawn == drawn:
            return
        self._drawn = drawn
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        points = self.series.points
        every = max(1, len(points) // (2 * max(self.size.width, 40)))  # plotext's cost is per point: two a column
        if every > 1:
            points = [p for i, p in enumerate(points) if i % every == 0 or p.nonfinite or i == len(points) - 1]
        running = self._in_flight()
        if running is not None:  # its loss, on the loss plot; the others' axes reach it, with no value there
            points = [*points, SeriesPoint(running.index, running.loss, None, 0)]
        xs = [p.index for p in points]
        log = self.log_scale and self.figure in LOG_FIGURES
        if self.cursor is not None and xs and xs[0] <= self.cursor <= xs[-1]:
            plt.vline(self.cursor, CURSOR_COLOR)  # first: a non-finite pass's red line is drawn over it
        self._lines, self._span = 0, None
        self._draw(points, xs, log)
        if log and self._lines:  # plotext cannot place log ticks over no value (nothing above zero)
            plt.yscale("log")
        if self._span is not None and self._span[1] - self._span[0] <= 1e-9 * max(map(abs, self._span)):
            plt.ylim(*_around(self._span[1], log))  # one value (raw and smoothed a rounding apart)
        self.title_text = self._title(points)
        plt.title(self.title_text)
        plt.xlabel("pass")
        if xs:
            step = max(1, math.ceil((xs[-1] - xs[0]) / 5))
            plt.xticks(list(range(xs[0], xs[-1] + 1, step)))  # passes are whole numbers
        self.refresh()

    def _in_flight(self) -> Running | None:
        """The pass in flight, if the series has no point of it yet (none of a pass that ended)."""
        running, points = self.in_flight, self.series.points
        return running if running is not None and (not points or points[-1].index < running.index) else None

    def _draw(self, points: list[SeriesPoint], xs: list[int], log: bool) -> None:
        plt = self.plt
        match self.figure:
            case "loss" | "norm":
                self._line(xs, [self.value(p) for p in points], log, "cyan" if self.figure == "loss" else "green")
                for p in points:
                    if is_nonfinite(p):
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
                    self._line(xs, [p.modules.get(module) for p in points], log, color, module)

    def value(self, point: SeriesPoint) -> float | None:
        """A loss or norm plot's raw value at `point` (the chosen module's or parameter's norm)."""
        if self.figure == "loss":
            return point.loss
        return point.grad_norm if self.chosen is None else self.series.norm_of(point, self.chosen)

    def _line(self, xs: list[int], ys: list[float | None], log: bool, color: str, label: str | None = None) -> None:
        """One line; smoothed over its raw values (dim) when smoothing is on."""
        plt = self.plt
        if self.smoothing > 0:
            x, y = _finite(xs, ys, log)
            if x:
                plt.plot(x, y, marker="braille", color=RAW_COLOR)
            ys = ema(ys, self.smoothing)
        x, y = _finite(xs, ys, log)
        if x:
            plt.plot(x, y, marker="braille", color=color, label=label)
            self._lines += 1
            low, high = min(y), max(y)
            self._span = (low, high) if self._span is None else (min(low, self._span[0]), max(high, self._span[1]))

    def _title(self, points: list[SeriesPoint]) -> str:
        """The figure's name, `· log`, `· n non-finite` (loss, norm), `· pass N: value` (the
        cursor): the longest of its forms that fits, as plotext drops a title that overflows."""
        if not points:
            return f"{TITLES[self.figure]} · no pass has ended yet"
        long, short = [], []
        chosen = self.chosen if self.chosen is not None and self.figure == "norm" else None
        if chosen is not None:
            long.append(chosen)
            short.append(chosen)
        if self.smoothing > 0 and self.figure in LOG_FIGURES:
            long.append(f"smoothed {self.smoothing:g}")
            short.append(f"~{self.smoothing:g}")
        if self.log_scale and self.figure in LOG_FIGURES:
            long.append("log")
            short.append("log")
        if self.figure in ("loss", "norm"):
            bad = sum(1 for p in self.series.points if is_nonfinite(p))
            if bad:
                long.append(f"{bad} non-finite")
                short.append(f"{bad}✗")
        reading = None
        if self.cursor is not None:
            reading, brief = self._reading(point_at(self.series.points, self.cursor))
            long.append(reading)
            reading = brief
            short.append(reading)
        name = "grad norm" if chosen is not None else TITLES[self.figure]
        head = SHORT_TITLES[self.figure]
        # the longest form that fits; short of room, the chosen parameter and the cursor's
        # reading stay longest (smoothing and log are the keys' own state: a glance tells them)
        forms = [[name, *long], [head, *long], [head, *short]]
        kept = [part for part in (chosen, reading) if part is not None]
        forms += [[head, *kept], kept, [head, *kept[-1:]], [head]]
        titles = [" · ".join(form) for form in forms]
        room = self.size.width - TITLE_MARGIN
        # plotext centres a title over the canvas, right of the y labels, and drops one that overflows
        return next((t for t in titles if len(t) <= room), titles[-1][: max(room, 1)])

    def _reading(self, point: SeriesPoint | None) -> tuple[str, str]:
        """What the figure says of the cursor's pass, and its short form (for a narrow plot)."""
        if point is None:
            return self._unplotted()
        text = self._value_text(point)
        return text, text.removeprefix("pass ")

    def _unplotted(self) -> tuple[str, str]:
        """The cursor's pass has no point: the pass in flight (what is known of it), or not kept."""
        running = self._in_flight()
        if running is None or running.index != self.cursor:
            return f"pass {self.cursor}: not plotted", f"{self.cursor}: not plotted"
        if self.figure == "loss":
            text = f"pass {running.index}: {format_number(running.loss)}, running"
            return text, text.removeprefix("pass ")
        what = "counts" if self.figure == "nonfinite" else "norms"
        return (
            f"pass {running.index} is running: its {what} are plotted when it ends",
            f"{running.index}: running, {what} at its end",
        )

    def _value_text(self, point: SeriesPoint) -> str:
        match self.figure:
            case "loss" | "norm":
                raw = self.value(point)
                text = f"pass {point.index}: {format_number(raw)}"
                if self.smoothing > 0 and raw is not None and math.isfinite(raw):
                    upto = [self.value(p) for p in self.series.points if p.index <= point.index]
                    text += f" ~{format_number(ema(upto, self.smoothing)[-1])}"
                return text
            case "nonfinite":
                return f"pass {point.index}: {point.nonfinite}"
            case _:
                top = max(point.modules.items(), key=lambda kv: kv[1] if math.isfinite(kv[1]) else -1.0, default=None)
                return f"pass {point.index}" + (f": {top[0]} {format_number(top[1])}" if top else "")


class PassPlots(Grid):
    """The plots of the passes view: two side by side (live), or four in a 2x2 grid (a recording)."""

    def __init__(self, series: PassSeries, recording: bool) -> None:
        super().__init__(id="passes-plots", classes="recording" if recording else "live")
        self.series = series
        self.figures = RECORDING_FIGURES if recording else LIVE_FIGURES
        self.log_scale = False
        """Loss and norms on a log scale (the passes view's `l`)."""
        self.cursor: int | None = None
        """The pass the plots mark and read (the passes table's row)."""
        self.smoothing = 0.0
        """The loss and norms smoothed with this weight (the passes view's `s`; 0: raw)."""
        self.chosen: str | None = None
        """A module or parameter whose norm the norm plot shows (the passes view's `t`)."""
        self.in_flight: Running | None = None
        """The pass in flight (the passes view's: a live run's pass that has not ended)."""

    def compose(self) -> ComposeResult:
        """One SeriesPlot per figure."""
        for figure in self.figures:
            yield SeriesPlot(self.series, figure, id=f"plot-{figure}")

    def replot(self) -> None:
        """Redraw every plot whose data, scale or cursor changed."""
        for plot in self.query(SeriesPlot):
            plot.log_scale, plot.cursor, plot.smoothing, plot.chosen, plot.in_flight = (
                self.log_scale,
                self.cursor,
                self.smoothing,
                self.chosen,
                self.in_flight,
            )
            plot.replot()
