"""The job hub's orders to a rank, one class each (`RankOrder`, a msgspec tagged union).

Rank 0's hub decides what each rank must do besides the client's commands (gradtui.distributed.hub):
park at the next gate because another rank is paused, resume from a park as the client's
command did, stop following (a rank died), forget a dead rank, keep the timeouts raised while a
client is attached, arm the diverge check. Rank 0 is handed an order as it is; another rank gets
it over its agent's wire, in an `Order` frame (gradtui.wire.frames) holding `wire_form(order)`, and
reads it back with `from_wire_form`: typed both ways, never a line to parse.
"""

from __future__ import annotations

import msgspec

from gradtui.protocol.commands import Continue, Finish, Step
from gradtui.wire import protocol


class Park(msgspec.Struct, frozen=True, tag=True):
    """Pause at the next gate ("parked"): another rank is paused; `reason` is the pause's."""

    reason: str


class Unpark(msgspec.Struct, frozen=True, tag=True):
    """The park order is over: a rank parked by it resumes as `resume`, the client's command
    that ended the stop (a step pauses again at the next node, a continue runs on)."""

    resume: Step | Continue | Finish


class Release(msgspec.Struct, frozen=True, tag=True):
    """No more gates or holds (a rank died, or the job lets this one go): run on as a lone process."""


class Gone(msgspec.Struct, frozen=True, tag=True):
    """Rank `rank` ended or died: no gate waits for it any more."""

    rank: int


class ClientAttached(msgspec.Struct, frozen=True, tag=True):
    """A client is attached to the job (`attached`) or has gone: the job can pause while one is."""

    attached: bool


class Diverge(msgspec.Struct, frozen=True, tag=True):
    """`break diverge` armed (`armed`) or deleted: compare the ranks' gradients after each pass."""

    armed: bool


RankOrder = Park | Unpark | Release | Gone | ClientAttached | Diverge
"""Every order the hub gives a rank."""

_DECODER = msgspec.msgpack.Decoder(RankOrder)


def wire_form(order: RankOrder) -> bytes:
    """`order` as MessagePack, tagged with its class name."""
    return msgspec.msgpack.encode(order)


def from_wire_form(data: bytes) -> RankOrder:
    """The order `wire_form` made `data` from (ProtocolError if it is not one)."""
    try:
        return _DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise protocol.ProtocolError(f"not a job hub's order: {exc}") from None
