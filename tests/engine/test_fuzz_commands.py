"""The command language fuzzed: thousands of generated command lines go
through `parse` and through a live session paused in a pass. No exception escapes either, nothing
hangs (every wait has a timeout), every refusal has a message, and each pass's leaf gradients
are a plain run's unless an edit was accepted in that pass.

The expressions mutate only `g` (a copy) or values they made: the script's own tensors are the
script's, as in pdb (`print y.mul_(0)` would change what autograd saved)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gradtui.protocol import events as ev
from gradtui.protocol.commands import CommandError, Continue, Finish, Quit, Step, parse
from tests.helpers import same, script

pytestmark = pytest.mark.timeout(120)

EXAMPLES = 2000
WAIT = 10.0
"""Seconds to wait for the answer to one command (a hang fails the test)."""


def forward(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The fuzzed script's pass (tests/fixtures/fuzz_loop.py)."""
    y = x * w
    z = torch.sgn(y) * y + y.exp()  # sgn sends a ZeroTensor
    return y, (z + z * y).sum()  # AddBackward0 sends one tensor to both sides


# ---- command lines ---------------------------------------------------------------------------

NUMBERS = st.sampled_from(
    [
        "0",
        "1",
        "2.5",
        "-3",
        "1e-3",
        "1e400",
        "nan",
        "inf",
        "-inf",
        "²",
        "١٢",
        "+4",
        "1_0",
        "0x10",
        "",
        "x",
        "1.2.3",
        "9" * 30,
        " 7 ",
    ]
)
G_ROOTS = st.sampled_from(["g", "g[0]", "g.t()", "g.data", "g.reshape(-1)", "g.view(3)", "g[None]", "g[0:2]"])
SCRIPT = st.sampled_from(["x", "w", "y", "loss", "x.grad", "w.shape", "x.detach()", "nosuch", "stash", "i"])
CONSTANTS = st.sampled_from(
    [
        "0",
        "1.5",
        "-2",
        "None",
        "'s'",
        "(g, g)",
        "[g]",
        "torch.zeros(3)",
        "torch.zeros(2)",
        "torch.ones_like(g)",
        "torch.zeros(3, dtype=torch.float64)",
        "1 / 0",
        "exit(1)",
        "(_ for _ in ()).throw(KeyboardInterrupt)",
        "(_ for _ in ()).throw(GeneratorExit)",
        "(_ for _ in ()).throw(SystemExit)",
        "torch.zeros(3, device='meta')",
        "torch._efficientzerotensor(3)",
        "g[5]",
        "torch",
    ]
)
PURE = st.sampled_from(
    [
        ".double()",
        ".half()",
        ".to_sparse()",
        ".to_mkldnn()",
        ".t()",
        ".reshape(1, -1)",
        ".clone()",
        ".abs()",
        ".neg()",
        ".detach()",
        ".sum()",
        ".mean()",
        ".item()",
        ".tolist()",
        ".shape",
        "[0]",
        "[None]",
        ".exp()",
        ".log()",
        ".sqrt()",
        ".norm()",
        ".grad",
        ".requires_grad",
        ".grad_fn",
        ".numel()",
        ".int()",
        ".bool()",
        ".float()",
        ".to_sparse().to_dense()",
    ]
)
IN_PLACE = st.sampled_from(
    [
        ".mul_(0)",
        ".zero_()",
        ".add_(1)",
        ".fill_(7)",
        ".clamp_(-1, 1)",
        ".requires_grad_()",
        ".copy_(torch.ones(3))",
        ".div_(0)",
        ".numpy().fill(3)",
        ".__setitem__(0, 9)",
    ]
)


MUTABLE = st.one_of(
    G_ROOTS,
    st.builds("({} {} {})".format, G_ROOTS, st.sampled_from(["+", "-", "*", "/", "@"]), st.one_of(G_ROOTS, SCRIPT)),
)
"""Values an expression may change in place: `g` (a copy) and what it makes."""
LEAF = st.one_of(MUTABLE, SCRIPT, CONSTANTS, st.builds(str.__add__, MUTABLE, IN_PLACE))
EXPRESSIONS = st.one_of(
    LEAF,
    st.builds("({}){}".format, LEAF, PURE),
    st.builds("{} {} {}".format, LEAF, st.sampled_from(["+", "*", "-", "==", "and", "if 1 else"]), LEAF),
    st.builds("({}, {})".format, LEAF, LEAF),
    st.builds("(({}){}){}".format, MUTABLE, IN_PLACE, PURE),
)
SPECS = st.one_of(
    st.sampled_from(
        [
            "nan",
            "norm>1",
            "norm>nan",
            "norm > 2",
            "loss>1",
            "loss nan",
            "loss>inf",
            "pass 3",
            "pass ²",
            "#0",
            "#2",
            "#99",
            "#²",
            "y",
            "loss",
            "x",
            "ŷ",
            "x²",
            "outs[1]",
            "MulBackward0",
            "SgnBackward0",
            "AccumulateGrad",
            "torch::autograd::AccumulateGrad",
            "module no.such",
            "module *",
            "fuzz_loop.py:16",
            "nosuch.py:3",
            "x.py:",
            "a..b",
            "x+y",
            "pass",
            "norm",
            "module",
        ]
    ),
    st.builds(str.__add__, st.sampled_from(["norm>", "loss>", "pass ", "#", "fuzz_loop.py:"]), NUMBERS),
)
RAW = st.text(alphabet=st.sampled_from(list("abgxyz019 .#:>[]()_-+'\"ŷ²١\t,=") + ["\x00", "é"]), max_size=12)
"""Any short text (no `*` or `<`: `9**9**9` would hang the interpreter, not gradtui)."""


def _verb(*words: str) -> st.SearchStrategy[str]:
    return st.sampled_from(words)


LINES = st.one_of(
    _verb(
        "step",
        "s",
        "n",
        "next",
        "STEP",
        "breakpoints",
        "zero",
        "help",
        "h",
        "?",
        "flow",
        "frobnicate",
        "continue",
        "c",
        "finish",
        "f",
        "quit",
        "q",
        "exit",
        "delete all",
        "d all",
        "print",
        "p",
    ),
    st.builds("{} {}".format, _verb("scale", "clip", "delete", "d", "zero", "step"), st.one_of(NUMBERS, RAW)),
    st.builds("{} {}".format, _verb("break", "b"), st.one_of(SPECS, RAW)),
    st.builds("{} {}".format, _verb("set", "print", "p", "why", "Print", "SET"), st.one_of(EXPRESSIONS, RAW)),
    RAW,
)


# ---- the test ------------------------------------------------------------------------------


class Live:
    """The fuzz loop script under a session, driven from the test's thread."""

    def __init__(self, driven) -> None:
        self.run = driven(script("fuzz_loop.py"))
        self.edits: list[ev.GradEdited] = []
        self.refusals = 0

    def until(self, kind: type, what: str):
        """The next event of `kind`; fail on a hang, on a pass that failed or on the script's end."""
        while True:
            event = self.run.next(ev.Event, timeout=WAIT)
            if isinstance(event, ev.GradEdited):
                self.edits.append(event)
            if isinstance(event, ev.PassFinished):
                assert event.error is None, f"pass {event.pass_index} failed: {event.error} (after {what})"
            assert not isinstance(event, ev.ScriptFinished), f"the script ended after {what}"
            if isinstance(event, kind):
                return event

    def send(self, line: str) -> None:
        """Submit one line as a user would type it; wait for what it makes the session say."""
        try:
            command = parse(line)
        except CommandError as exc:
            assert str(exc), f"refusal without a message: {line!r}"
            command = None
        if isinstance(command, (Continue, Finish, Quit)):
            return  # they leave the pause: parse alone is fuzzed for them
        self.run.submit(line)
        if isinstance(command, Step):
            self.until(ev.Paused, line)
            return
        result = self.until(ev.CommandResult, line)
        assert result.text, f"an empty answer to {line!r}"
        self.refusals += not result.ok


def test_fuzzed_commands_through_parse_and_a_live_session(driven, stash):
    stash["forward"], stash["grads"] = forward, []
    x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    w = torch.tensor([0.5, 0.25, -1.0], requires_grad=True)
    forward(x, w)[1].backward()
    expected = (x.grad, w.grad)
    live = Live(driven)
    live.until(ev.Paused, "the start")
    seen = []

    # No shrinking: replaying examples on a session that has moved on would not reproduce them,
    # and each replay of a hang would wait out its timeouts again.
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(LINES, min_size=1, max_size=4))
    def example(lines: list[str]) -> None:
        seen.append(lines)
        edits = len(live.edits)
        for line in lines:
            live.send(line)
        live.send("delete all")
        if len(live.edits) > edits or len(seen) % 8 == 0:  # an edited pass ends at once: most stay unedited
            live.run.submit("finish")
            live.until(ev.Paused, "finish")

    example()
    stash["stop"] = True
    live.run.submit("delete all")
    live.run.submit("continue")
    finished = live.run.join()
    assert finished.exit_status == 0, finished.traceback
    assert len(seen) >= EXAMPLES // 2 and live.refusals > len(seen) // 4
    passes = stash["grads"]
    assert len(passes) > len(seen) // 8 and len(live.edits) > len(seen) // 50
    edited = {e.pass_index for e in live.edits}
    unedited = [(i, gx, gw) for i, gx, gw in passes if i not in edited]
    assert len(unedited) > len(passes) // 4
    for i, gx, gw in unedited:
        assert same(gx, expected[0]) and same(gw, expected[1]), f"pass {i} changed without an edit"
