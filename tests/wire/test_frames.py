"""A client's frames are typed: a command crosses the wire as the same class with the same fields,
a command class added to the table travels without touching the wire, and what is not a frame of
ours (an unknown command, a nested value where a command belongs) is refused, never recursed into."""

from __future__ import annotations

import msgspec
import pytest

from gradtui.distributed import orders
from gradtui.protocol import commands
from gradtui.protocol.commands import COMMANDS, Command, Continue, Step, parse
from gradtui.wire import frames, protocol

LINES = [
    "step",
    "c",
    "finish",
    "break nan",
    "b model.py:42",
    "break norm>2.5",
    "b #4",
    "break module encoder.*",
    "breakpoints",
    "delete all",
    "delete 3",
    "scale 0.5",
    "zero",
    "clip 1e-3",
    "set g.clamp(-1, 1)",
    "p",
    "print x.grad.norm()",
    "!g = g * 0.5",
    "interact",
    "pause",
    "why 0.weight",
    "flow",
    "flow 3",
    "pass 30",
    "ranks",
    "rank 1",
    "help",
    "detach",
    "q",
]


def _through(frame: frames.ClientFrame) -> frames.ClientFrame:
    data = frames.encode(frame)
    assert protocol.HEADER.unpack(data[: protocol.HEADER.size])[0] == len(data) - protocol.HEADER.size
    return frames.decode(data[protocol.HEADER.size :])


@pytest.mark.parametrize("line", LINES)
def test_a_command_crosses_the_wire_as_the_same_class_with_the_same_fields(line):
    command = parse(line)
    got = _through(frames.Submit.of(command, 7))
    assert isinstance(got, frames.Submit) and got.id == 7
    back = got.command_of()
    assert type(back) is type(command) and back == command and back.text == command.text
    if isinstance(command, commands.Break):  # its spec parsed once, by the client: it arrives whole
        assert isinstance(back, commands.Break) and back.spec == command.spec
        assert type(back.spec.value) is type(command.spec.value)  # `model.py:42`'s (file, line) a tuple again


def test_every_command_class_of_the_table_is_covered_above():
    assert {type(parse(line)) for line in LINES} == set(COMMANDS)


def test_quit_detach_and_a_hubs_orders_are_frames_too():
    assert isinstance(_through(frames.Quit()), frames.Quit)
    assert isinstance(_through(frames.Detach()), frames.Detach)
    for order in (
        orders.Park("parked: rank 1 is paused at #3 op (pass 0)"),
        orders.Unpark(Step("s")),
        orders.Unpark(Continue("continue")),
        orders.Release(),
        orders.Gone(3),
        orders.ClientAttached(False),
        orders.Diverge(True),
    ):
        got = _through(frames.Order(msgspec.Raw(orders.wire_form(order))))
        assert isinstance(got, frames.Order) and orders.from_wire_form(bytes(got.order)) == order


def test_a_command_class_added_to_the_table_travels_without_touching_the_wire(monkeypatch):
    class Throwaway(Command, frozen=True):
        """A command a contributor adds: defining it is all."""

        verb = "throwaway"
        summary = "a command for this test"

    try:
        command = parse("throwaway")
        assert isinstance(command, Throwaway)
        assert _through(frames.Submit.of(command, 1)).command_of() == command
    finally:
        COMMANDS.remove(Throwaway)
    with pytest.raises(protocol.ProtocolError, match="not a gradtui command"):
        _through(frames.Submit.of(command, 1)).command_of()  # out of the table: no longer ours


@pytest.mark.parametrize(
    "payload",
    [
        msgspec.msgpack.encode({"frame": "submit", "id": 1, "command": {"type": "Frobnicate", "text": "x"}}),
        msgspec.msgpack.encode({"frame": "submit", "id": 1, "command": {"type": "Scale", "text": "s", "factor": "x"}}),
        msgspec.msgpack.encode({"frame": "submit", "id": "one", "command": {"type": "Step", "text": "s"}}),
        msgspec.msgpack.encode(
            {"frame": "submit", "id": 1, "command": {"type": "Break", "text": "break nan", "spec": "nan"}}
        ),  # the text, where a parsed spec belongs
        msgspec.msgpack.encode(
            {
                "frame": "submit",
                "id": 1,
                "command": {"type": "Break", "text": "b x", "spec": {"kind": "frobnicate", "value": 1, "text": "x"}},
            }
        ),
        msgspec.msgpack.encode(
            {
                "frame": "submit",
                "id": 1,
                "command": {"type": "Break", "text": "b x", "spec": {"kind": "norm", "value": "big", "text": "x"}},
            }
        ),
        msgspec.msgpack.encode(
            {
                "frame": "submit",
                "id": 1,
                "command": {"type": "Break", "text": "b x", "spec": {"kind": "pass", "value": 2.5, "text": "x"}},
            }
        ),
        msgspec.msgpack.encode({"frame": "run", "code": "import os"}),
        msgspec.msgpack.encode({"submit": "step", "id": 1}),  # the text a version-1 client sent
    ],
    ids=[
        "unknown command",
        "wrong field type",
        "wrong id type",
        "a spec's text",
        "unknown spec kind",
        "spec value not its kind's type",
        "a float for an int kind",
        "unknown frame",
        "a line",
    ],
)
def test_what_is_not_one_of_our_frames_is_refused(payload):
    with pytest.raises(protocol.ProtocolError):
        frame = frames.decode(payload)
        if isinstance(frame, frames.Submit):
            frame.command_of()


def test_a_deeply_nested_command_is_refused_not_recursed_into():
    deep = b"\x91" * 200_000 + b"\xc0"  # 200,000 nested arrays where a command belongs
    header = msgspec.msgpack.encode({"frame": "submit", "id": 1})
    payload = bytes([header[0] + 1]) + header[1:] + msgspec.msgpack.encode("command") + deep
    with pytest.raises(protocol.ProtocolError):
        frames.decode(payload)


def test_the_parser_is_the_one_that_made_the_command():
    """The table's decoder is built from the classes `parse` makes: a command decoded is
    `commands.from_wire_form` of what `commands.wire_form` made, tagged by its class name."""
    command = parse("clip 2")
    assert msgspec.msgpack.decode(commands.wire_form(command)) == {"type": "Clip", "text": "clip 2", "max_norm": 2.0}
