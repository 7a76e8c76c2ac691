"""A recording as TensorBoard event files, written with the `tensorboard` package's own writer.

`export_tensorboard(db, folder)` reads the recording with `reader.Recording` and writes one event
file into `folder` (made if missing) with `tensorboard.summary.writer.event_file_writer`, the
writer TensorBoard's summary API uses, so `tensorboard --logdir` opens it beside the user's runs.
Each pass is a step (its index) at its own wall time (the run's start plus the pass's start):

- `loss` (the first root's loss; `loss/root1`... for the others a pass backpropagated from),
  `grad_norm/global` and `nonfinite/global` (every pass);
- per parameter, from the pass's gradient flow: `grad_norm/NAME`, `weight_norm/NAME`,
  `nonfinite/NAME` (every pass; no `grad_norm` point when the parameter got no gradient);
- `grad/NAME`: a histogram of the gradient that reached the parameter in the pass, on the
  passes with per-node data (`--record-all`, `--record-every N`, hooked passes). Its min, max,
  count, sum and sum of squares are the recorded statistics, exactly; its buckets are exact when
  gradtui kept the values (at most 64 elements), otherwise one bucket from min to max, because a
  recording keeps no finer shape of a big gradient. A gradient holding a NaN or an infinity has
  no histogram point (TensorBoard cannot draw one); `nonfinite/NAME` counts it.

`tensorboard` is an optional dependency (`pip install 'gradtui[tensorboard]'`): `writer_missing()`
says so in one line when it is not installed. No torch here: numpy bins the kept values.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from gradtui.protocol.events import ParamFlow
from gradtui.protocol.stats import Stats
from gradtui.record.reader import NodeStats, PassInfo, Recording

INSTALL_HINT = "pip install 'gradtui[tensorboard]'"
"""How to get the optional writer."""

BUCKETS = 30
"""Buckets of a histogram drawn from a gradient's kept values (TensorBoard's own default count)."""

FILE_SUFFIX = ".gradtui"
"""The end of the event file's name: TensorBoard reads any `events.out.tfevents.*` file."""


def writer_missing() -> str | None:
    """Why the TensorBoard writer cannot be imported (one line naming the install), or None."""
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2  # noqa: F401
        from tensorboard.summary.writer.event_file_writer import EventFileWriter  # noqa: F401
    except ImportError as exc:
        return f"the tensorboard package is not installed ({exc.name or exc}): {INSTALL_HINT}"
    return None


@dataclass(frozen=True, slots=True)
class Scalar:
    """One scalar point: its tag and value."""

    tag: str
    value: float


@dataclass(frozen=True, slots=True)
class Histogram:
    """One histogram point in TensorBoard's terms (HistogramProto): bucket i holds the values in
    (bucket_limit[i-1], bucket_limit[i]]."""

    tag: str
    min: float
    max: float
    num: float
    sum: float
    sum_squares: float
    bucket_limit: tuple[float, ...]
    bucket: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Step:
    """What one pass writes: its step (the pass index), wall time and points."""

    step: int
    wall_time: float
    scalars: tuple[Scalar, ...]
    histograms: tuple[Histogram, ...]


def loss_tag(root: int) -> str:
    """The tag of the loss of a pass's `root`-th root (`loss` for the first)."""
    return "loss" if root == 0 else f"loss/root{root}"


def pass_scalars(info: PassInfo, flow: tuple[ParamFlow, ...]) -> list[Scalar]:
    """A pass's scalar points (module doc): losses, global figures, per-parameter figures."""
    out = [Scalar(loss_tag(i), loss) for i, loss in enumerate(info.losses) if loss is not None]
    if info.grad_norm is not None:
        out.append(Scalar("grad_norm/global", info.grad_norm))
    out.append(Scalar("nonfinite/global", float(info.nonfinite)))
    for param in flow:
        if param.grad_norm is not None:
            out.append(Scalar(f"grad_norm/{param.name}", param.grad_norm))
        out.append(Scalar(f"weight_norm/{param.name}", param.weight_norm))
        out.append(Scalar(f"nonfinite/{param.name}", float(param.nonfinite)))
    return out


def histogram_of(tag: str, stats: Stats) -> Histogram | None:
    """The histogram point of a gradient's recorded statistics (module doc), or None when they
    cannot make one: no values read, light statistics (no min or max), a non-finite element."""
    if stats.unreadable is not None or stats.min is None or stats.max is None or stats.mean is None:
        return None
    if stats.nonfinite or not all(math.isfinite(v) for v in (stats.min, stats.max, stats.mean, stats.norm)):
        return None
    num = stats.numel
    if num == 0:
        return None
    if stats.values is not None:
        values = np.asarray(stats.values, dtype=np.float64)
        total, squares = float(values.sum()), float(np.square(values).sum())
        if stats.max > stats.min:  # BUCKETS equal buckets, each closed on the right as TensorBoard's are
            edges = np.linspace(stats.min, stats.max, BUCKETS + 1)[1:]
            edges[-1] = stats.max
            where = np.minimum(np.searchsorted(edges, values, side="left"), BUCKETS - 1)
            limits = tuple(float(e) for e in edges)
            buckets = tuple(float(c) for c in np.bincount(where, minlength=BUCKETS))
        else:  # every value equal: one bucket
            limits, buckets = (stats.max,), (float(num),)
    else:
        limits, buckets = (stats.max,), (float(num),)
        total, squares = stats.mean * num, stats.norm * stats.norm
    return Histogram(tag, stats.min, stats.max, float(num), total, squares, limits, buckets)


def pass_histograms(flow: tuple[ParamFlow, ...], stats: dict[int, NodeStats]) -> list[Histogram]:
    """Per parameter of the flow, the histogram of the gradient its accumulator node received."""
    out = []
    for param in flow:
        ran = stats.get(param.node) if param.node is not None else None
        if ran is None or not ran.grad_outputs or ran.grad_outputs[0] is None:
            continue
        if (point := histogram_of(f"grad/{param.name}", ran.grad_outputs[0])) is not None:
            out.append(point)
    return out


def steps(recording: Recording) -> Iterator[Step]:
    """Every pass of the recording as the points it writes, in order."""
    started = recording.run().started or 0.0
    for info in recording.passes():
        flow = recording.flow(info.index)
        histograms = pass_histograms(flow, recording.stats(info.index)) if info.per_node else []
        yield Step(info.index, started + info.started, tuple(pass_scalars(info, flow)), tuple(histograms))


@dataclass(frozen=True, slots=True)
class Written:
    """How a TensorBoard export went: the passes written, and what of the recording was found
    damaged and left out (`reader.Recording.damage`)."""

    passes: int
    damage: tuple[str, ...]


def export_tensorboard(db: str, folder: str) -> Written:
    """Write recording `db` into `folder` as one TensorBoard event file (module doc).

    Raises ImportError without the tensorboard package (`writer_missing` says it in words),
    schema.NotARecording for a file that is not a recording, OSError if `folder` cannot be made
    or written.
    """
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    os.makedirs(folder, exist_ok=True)
    with Recording(db) as recording:
        writer = EventFileWriter(folder, max_queue_size=64, filename_suffix=FILE_SUFFIX)
        count = 0
        try:
            for step in steps(recording):
                values = [summary_pb2.Summary.Value(tag=s.tag, simple_value=s.value) for s in step.scalars]
                values += [
                    summary_pb2.Summary.Value(
                        tag=h.tag,
                        histo=summary_pb2.HistogramProto(
                            min=h.min,
                            max=h.max,
                            num=h.num,
                            sum=h.sum,
                            sum_squares=h.sum_squares,
                            bucket_limit=list(h.bucket_limit),
                            bucket=list(h.bucket),
                        ),
                    )
                    for h in step.histograms
                ]
                writer.add_event(
                    event_pb2.Event(wall_time=step.wall_time, step=step.step, summary=summary_pb2.Summary(value=values))
                )
                count += 1
        finally:
            writer.close()
        return Written(count, tuple(recording.damage))
