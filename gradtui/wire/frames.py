"""What a client sends an agent once admitted: typed frames, one tagged union (`ClientFrame`).

A line is parsed where it enters (the client); what travels is the command it became
(`Submit`), never the text to parse again. The frame is decoded by its type: `Submit`'s
command by the command table's tagged union (gradtui.protocol.commands.from_wire_form), so a
frame holds only the fields its class names, of plain values (a `break`'s parsed spec: a Struct
of fixed fields, its value checked against its kind's type), and nothing in it can nest deeper
(a deeply nested value where a command belongs is refused, as any malformed frame is).
`Order` carries a torchrun job hub's order to a rank (gradtui.distributed.orders), opaque here.

    client -> agent    Submit(command, id) | Quit() | Detach() | Order(order) | ShowFlow(shown) | Drawn(pass_index)
"""

from __future__ import annotations

import msgspec

from gradtui.protocol.commands import Command, CommandError, from_wire_form, wire_form
from gradtui.wire import protocol


class Submit(msgspec.Struct, frozen=True, tag="submit", tag_field="frame"):
    """Run `command` (parsed by the client); its answers carry request id `id`."""

    command: msgspec.Raw
    """The command's wire form (`wire_form`): read with `command_of`."""
    id: int

    @classmethod
    def of(cls, command: Command, request: int) -> Submit:
        """The frame that submits `command` as request `request`."""
        return cls(msgspec.Raw(wire_form(command)), request)

    def command_of(self) -> Command:
        """The command this frame carries (ProtocolError if it is not one)."""
        try:
            return from_wire_form(bytes(self.command))
        except CommandError as exc:
            raise protocol.ProtocolError(str(exc)) from None


class Quit(msgspec.Struct, frozen=True, tag="quit", tag_field="frame"):
    """Stop the script (the client leaves with it)."""


class Detach(msgspec.Struct, frozen=True, tag="detach", tag_field="frame"):
    """Leave the script running without this client."""


class Order(msgspec.Struct, frozen=True, tag="order", tag_field="frame"):
    """A job hub's order to a rank's agent (park, unpark, ...): its wire form, which the job's
    own code reads (gradtui.distributed.orders); an agent outside a job ignores it."""

    order: msgspec.Raw


class ShowFlow(msgspec.Struct, frozen=True, tag="flow", tag_field="frame"):
    """Does this client show every pass's gradient flow now (its flow table or passes view)? The
    agent computes a hooked pass's flow only for a client that shows it, or a pass it saw paused."""

    shown: bool


DRAWN_EVERY = 0.2
"""Seconds at least the UI leaves between two `Drawn`: while the script runs on, its agent describes
about 1 / DRAWN_EVERY passes a second at most (a screen a person reads), whatever the script's pace
and however fast the UI draws."""


class Drawn(msgspec.Struct, frozen=True, tag="drawn", tag_field="frame"):
    """This client has drawn the end of pass `pass_index`, one the agent sent it described: describe
    the next pass that starts. A client that says it is paced from then on: a pass that starts
    while it has not drawn the last one described is sent without its description unless it
    pauses (gradtui.agent.server)."""

    pass_index: int


ClientFrame = Submit | Quit | Detach | Order | ShowFlow | Drawn
"""Every frame a client may send once admitted."""

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(ClientFrame)


def encode(frame: ClientFrame) -> bytes:
    """One wire frame (length and payload) holding `frame`."""
    payload = _ENCODER.encode(frame)
    return protocol.HEADER.pack(len(payload)) + payload


def decode(payload: bytes) -> ClientFrame:
    """The client frame in a payload, or ProtocolError (not one of ours, or nested too deep)."""
    try:
        return _DECODER.decode(payload)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise protocol.ProtocolError(f"not a gradtui client frame: {exc}") from None
