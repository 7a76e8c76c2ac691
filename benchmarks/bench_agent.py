"""The bench's figures across the agent boundary: the wire (a 10,000-node graph frame, NodeRan
events through a real AgentServer) and the UI (Pilot, against a real child agent process).

A module of bench.py's (`python benchmarks/bench.py --only wire,ui`); rows go to its one table.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import secrets
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from benchtable import Row, add, median, ms

from gradtui.agent.server import BATCH_INTERVAL, AgentServer, ServerHooks
from gradtui.engine.capture.graph import Names, capture
from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.protocol.commands import Command, parse
from gradtui.wire import protocol
from gradtui.wire.client import RemoteTarget
from gradtui.wire.codec import from_wire, to_wire
from gradtui.wire.frames import DRAWN_EVERY


def _chain_loss(muls: int) -> torch.Tensor:
    """A scalar at the end of a chain of `muls` multiplications (muls + 2 autograd nodes)."""
    x = torch.tensor([1.0], requires_grad=True)
    y = x
    for _ in range(muls):
        y = y * 1.0001
    return y.sum()


# ---- a 10,000-node graph frame -----------------------------------------------------------


def _timed(fn, repeat: int) -> tuple[float, object]:
    """The median seconds of `fn()` over `repeat` runs after one warm-up, and its last result."""
    result = fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return median(times), result


def _mb(size: int) -> str:
    return f"{size / 1e6:.2f} MB"


def bench_graph_frame(muls: int, repeat: int) -> None:
    """A PassStarted of a `muls`-mul chain as the agent sends it: to_wire, then stdlib json
    (protocol.encode/decode, what the wire uses today) beside msgspec.json and msgspec.msgpack
    encoding the same to_wire() data, then from_wire. Sizes and medians, side by side."""
    loss = _chain_loss(muls)
    capture_time, cap = _timed(lambda: capture([loss.grad_fn], Names()), repeat)
    event = ev.PassStarted(0, "backward", "loss.backward()", "chain.py:9", cap.graph, cap.roots, (1.0,))
    nodes = cap.graph.number_of_nodes()
    sizes = f"PassStarted of a {nodes:,}-node chain of muls"
    to_time, data = _timed(lambda: {"events": [to_wire(event)]}, repeat)
    enc_time, frame = _timed(lambda: protocol.encode(data), repeat)
    payload = frame[protocol.HEADER.size :]
    dec_time, decoded = _timed(lambda: protocol.decode(payload), repeat)
    from_time, back = _timed(lambda: from_wire(decoded["events"][0]), repeat)
    assert back.graph.number_of_nodes() == nodes and back.roots == event.roots, "the frame did not round-trip"
    wire_time = enc_time + dec_time
    add(
        Row(
            "wire: graph frame, protocol.encode + decode (msgspec MessagePack)",
            sizes,
            f"{_mb(len(frame))}, {ms(enc_time)} + {ms(dec_time)} = {ms(wire_time)}",
            f"{ms(capture_time)} capture",
            wire_time / capture_time,
            "-",
            None,
        )
    )
    add(
        Row(
            "  the same frame: to_wire + from_wire (codec, either format)",
            sizes,
            f"{ms(to_time)} + {ms(from_time)} = {ms(to_time + from_time)}",
            f"{ms(capture_time)} capture",
            (to_time + from_time) / capture_time,
            "-",
            None,
        )
    )
    total = to_time + wire_time + from_time
    add(
        Row(
            "  the same frame, whole trip",
            sizes,
            ms(total),
            f"{ms(capture_time)} capture",
            total / capture_time,
            "-",
            None,
        )
    )
    # The formats the protocol was chosen from, on the same to_wire() data (stdlib json: the baseline)
    j_enc, text = _timed(lambda: json.dumps(data, separators=(",", ":")).encode(), repeat)
    j_dec, expected = _timed(lambda: json.loads(text), repeat)
    json_time = j_enc + j_dec
    add(
        Row(
            "  the same to_wire() data, stdlib json",
            sizes,
            f"{_mb(len(text))}, {ms(j_enc)} + {ms(j_dec)} = {ms(json_time)}",
            f"{ms(wire_time)} protocol",
            json_time / wire_time,
            "-",
            None,
        )
    )
    import msgspec

    for name, codec in (("msgspec.json", msgspec.json), ("msgspec.msgpack", msgspec.msgpack)):
        encoder, decoder = codec.Encoder(), codec.Decoder()
        m_enc, blob = _timed(lambda: encoder.encode(data), repeat)
        m_dec, value = _timed(lambda: decoder.decode(blob), repeat)
        assert value == expected, f"{name} decoded other data than stdlib json"
        add(
            Row(
                f"  the same to_wire() data, {name}",
                sizes,
                f"{_mb(len(blob))}, {ms(m_enc)} + {ms(m_dec)} = {ms(m_enc + m_dec)}",
                f"{ms(json_time)} stdlib json",
                (m_enc + m_dec) / json_time,
                "-",
                None,
            )
        )


# ---- NodeRan events through a real AgentServer ------------------------------------------


@dataclass
class Received:
    """What the client end saw: each frame's arrival time and its events' kinds."""

    frames: list[tuple[float, int, int]] = field(default_factory=list)
    """(perf_counter at arrival, NodeRan events in it, PassFinished events in it)."""
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    cpu: float = 0.0
    """Seconds of CPU the reader's thread spent, all of it (set as it ends)."""


def _client(
    sock: socket.socket,
    token: str,
    passes: int,
    received: Received,
    ready: threading.Event,
    every: float | None = None,
) -> None:
    """A RemoteTarget on the other end of the socketpair, reading until `passes` passes finished.
    `every`: it says `drawn` as the UI's link does (`every` = DRAWN_EVERY), once it has decoded the
    end of a pass it was sent described, `every` seconds after the last at the soonest (a UI draws
    the pass first: this client, which draws nothing, is sent at least as many passes as a UI);
    math.inf: once, after the first pass; None: never (every pass is sent described)."""

    async def read() -> None:
        target = RemoteTarget(token, sock=sock)
        await target.start()
        ready.set()
        finished = 0
        described = None
        loop, soonest = asyncio.get_running_loop(), 0.0
        async for batch in target.batches():
            ran = sum(isinstance(e, ev.NodeRan) for e in batch)
            ended = sum(isinstance(e, ev.PassFinished) for e in batch)
            received.frames.append((time.perf_counter(), ran, ended))
            for event in batch if every is not None and soonest != math.inf else ():
                if isinstance(event, ev.PassStarted) and event.recorded and event.described:
                    described = event.pass_index
                elif isinstance(event, ev.PassFinished) and event.pass_index == described:
                    now = time.monotonic()
                    loop.call_later(max(0.0, soonest - now), target.drawn, event.pass_index)
                    soonest, described = max(now, soonest) + every, None
            finished += ended
            if finished >= passes:
                break
        target.close()

    try:
        asyncio.run(asyncio.wait_for(read(), 300))
    except BaseException as exc:  # noqa: BLE001 - reported by the bench's main thread
        received.error = exc
    finally:
        received.cpu = time.thread_time()
        ready.set()
        received.done.set()


def _thread_cpu(name: str) -> float | None:
    """Seconds of CPU the live thread called `name` has spent (None: no such thread, or no
    per-thread CPU clock on this system)."""
    thread = next((t for t in threading.enumerate() if t.name == name), None)
    if thread is None or thread.ident is None or not hasattr(time, "pthread_getcpuclockid"):
        return None
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except OSError:
        return None


def _run_passes(session: Session, muls: int, passes: int) -> float:
    """Seconds of `passes` backward calls (forwards built outside the timing) under `session`."""
    elapsed = 0.0
    session.install()
    try:
        for _ in range(passes):
            loss = _chain_loss(muls)
            start = time.perf_counter()
            loss.backward()
            elapsed += time.perf_counter() - start
            del loss
    finally:
        session.uninstall()
    return elapsed


def _continuing(listener) -> Session:
    """A UI-like session (norms only, a `nan` watch) running on without a first pause."""
    session = Session(listener, provenance=False, full_stats=False)
    session.submit(parse("break nan"))
    session.run_on()  # no first pause: measure the stream, not a human
    return session


def bench_event_stream(muls: int, passes: int) -> None:
    """`passes` passes of a `muls`-mul chain in `continue`, their events served by an
    AgentServer over a socketpair to a RemoteTarget reading in a thread of its own; against the
    same passes under a session with a no-op listener. Frames per second must stay near
    1 / BATCH_INTERVAL while every NodeRan arrives. The reader decodes in this process (a real
    UI is another one), so its share of the GIL is in the ratio: an upper bound."""
    base = _run_passes(_continuing(lambda e: None), muls, 1)  # warm-up: allocator, hooks
    base = _run_passes(_continuing(lambda e: None), muls, passes)
    token = secrets.token_urlsafe(16)
    ours, theirs = socket.socketpair()
    session: Session | None = None

    def submit(command: Command, request: int) -> None:
        assert session is not None
        session.submit(command, request)

    server = AgentServer(None, token, ServerHooks(submit=submit, quit=lambda: None))
    session = _continuing(server)
    received, ready = Received(), threading.Event()
    reader = threading.Thread(
        target=_client, args=(theirs, token, passes, received, ready), name="bench-wire-client", daemon=True
    )
    server.start()
    server.serve_connection(ours)
    reader.start()
    try:
        assert ready.wait(30) and received.error is None, f"the client did not attach: {received.error!r}"
        began = time.perf_counter()
        served = _run_passes(session, muls, passes)
        assert received.done.wait(120), "the client never saw the last pass finish"
        assert received.error is None, f"the client failed: {received.error!r}"
    finally:
        server.close("bench done", timeout=2.0)
        reader.join(10)
        theirs.close()
    nodes = muls + 2
    ran = sum(n for _, n, _ in received.frames)
    assert ran == nodes * passes, f"{ran} NodeRan events arrived of {nodes * passes}"
    span = received.frames[-1][0] - began
    frames = len(received.frames)
    rate = frames / span
    sizes = f"{passes} passes of a {nodes:,}-node chain in continue, socketpair, RemoteTarget reader"
    add(
        Row(
            "wire: NodeRan events through AgentServer to a client",
            sizes,
            f"{ran / span:,.0f} events/s ({ms(served)} backward)",
            f"{nodes * passes / base:,.0f} events/s, no server ({ms(base)})",
            served / base,
            "-",
            None,
        )
    )
    limit = 1 / BATCH_INTERVAL + 5
    add(
        Row(
            "  frames while they flow",
            sizes,
            f"{frames} frames in {ms(span)}: {rate:.1f}/s",
            f"{ran / frames:,.0f} events a frame",
            None,
            f"<= {limit:.0f}/s, every event",
            rate <= limit,
        )
    )


def bench_wire(quick: bool) -> None:
    """The wire group: the graph frame, then the event stream."""
    bench_graph_frame(10_000, 3 if quick else 7)
    bench_event_stream(10_000, 2 if quick else 5)


# ---- the UI, against a real child agent --------------------------------------------------

LONG_CHAIN = """\
import sys
import time
import torch
x = torch.tensor([1.0], requires_grad=True)
y = x
for _ in range({n}):
    y = y * 1.0001
loss = y.sum()
with open(sys.argv[1], "w") as mark:
    mark.write(repr(time.perf_counter()))  # CLOCK_MONOTONIC: the same clock in both processes
loss.backward()
"""


async def _drive(app: Any, steps: int) -> None:
    """Run `app` (bench_ui's TimedApp) under Pilot: wait for its first pause, then press `s`
    `steps` times, each once the last step's pause is drawn; then quit."""
    async with app.run_test(size=(120, 40)) as pilot:
        deadline = time.monotonic() + 120
        while app.first_paint is None:
            assert time.monotonic() < deadline, "the first pause never came"
            assert not app.link.finished.is_set(), "the agent ended before its first pause"
            await pilot.pause(0.005)
        await pilot.pause(0.2)
        for _ in range(steps):
            count = len(app.times)
            app.pressed = time.perf_counter()  # the `s` key's action sends `step` as the press is handled
            await pilot.press("s")
            deadline = time.monotonic() + 10
            while len(app.times) == count:
                assert time.monotonic() < deadline, "a step never drew"
                await pilot.pause(0.001)
        await app.action_quit()


def bench_ui(nodes: int, steps: int) -> None:
    """With a `nodes`-node pass loaded in the Textual app (Pilot, headless), the script in the
    child agent GradtuiApp starts: the time from the script's backward call (in the agent) to
    the pass drawn (paused at its first node), and the median time from the `s` key to the
    next paused node drawn (the command crosses the wire, the Paused event comes back)."""
    from gradtui.ui.app import GradtuiApp

    class TimedApp(GradtuiApp):
        """Records when each pause is on screen, and the time from each step action to it."""

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.times: list[float] = []
            self.first_paint: float | None = None
            self.pressed: float | None = None

        def apply_batch(self, batch: list[ev.Event]) -> None:
            super().apply_batch(batch)
            if not any(isinstance(event, ev.Paused) for event in batch):
                return
            if self.first_paint is None:
                self.call_after_refresh(lambda: setattr(self, "first_paint", time.perf_counter()))
            elif self.pressed is not None:
                start, self.pressed = self.pressed, None
                self.call_after_refresh(lambda: self.times.append(time.perf_counter() - start))

    with tempfile.TemporaryDirectory() as folder:
        script, mark = os.path.join(folder, "long_chain.py"), os.path.join(folder, "mark")
        with open(script, "w") as f:
            f.write(LONG_CHAIN.format(n=nodes - 2))
        app = TimedApp(script, [mark])
        started = time.perf_counter()
        try:
            asyncio.run(_drive(app, steps))
        finally:
            app.target.kill_now()  # type: ignore[attr-defined]  # never leave the agent behind
        process = app.target.process  # type: ignore[attr-defined]
        with open(mark) as f:
            backward_called = float(f.read())
    assert process is not None and process.returncode is not None, "the child agent outlived the UI's quit"
    assert app.first_paint is not None
    sizes = f"a {nodes:,}-node pass (chain of muls) in a child agent, 120x40 terminal, Pilot headless"
    paint = app.first_paint - backward_called
    add(
        Row(
            "UI: the pass drawn after its backward call (in the agent)",
            sizes,
            ms(paint),
            f"{ms(app.first_paint - started)} from app start",
            None,
            "<= 1 s",
            paint <= 1.0,
        )
    )
    step = median(app.times)
    add(
        Row(
            "UI: `s` key to the next node drawn, median (across the wire)",
            sizes,
            ms(step),
            f"max {ms(max(app.times))}, {steps} steps",
            None,
            "<= 50 ms",
            step <= 0.050,
        )
    )


# ---- the agent as the UI builds it, on the encoder -----------------------------------------

AGENT_BLOCK = 5
"""Consecutive passes of one kind (plain, then gradtui) in the agent rows' alternation."""


def bench_agent_encoder(
    layers: int, width: int, batch: tuple[int, int], passes: int, target: float | None = None
) -> None:
    """Backward of the encoder under the agent the UI talks to, against plain backward: a session
    whose one listener is an AgentServer attached as gradtui.agent.build attaches it (the graph,
    every NodeRan, the leaves' gradients; the flow only while the client shows it: this client,
    like the UI before its flow table or passes view opens, shows none), its events framed onto a socketpair
    to a RemoteTarget that reads and decodes them in a thread (no Textual); `continue` + `nan`,
    no watch, and every statistic. Wall time of `backward()` (what the script pays, the writer
    and the reader threads' share of the GIL included), plain and gradtui passes alternated in
    blocks of AGENT_BLOCK, each forward built outside the timed region; medians (a described pass
    costs more than the median one: the wall time's mean is beside the passes described). Beside each, the CPU each thread spent
    per gradtui pass (the script's in `backward()`, the agent's writer, the reader), ratios to a
    plain `backward()`'s thread time. `target`: the bound of the `continue` + `nan` row (the others
    are info)."""
    from bench_models import model_sizes, transformer

    model = transformer(layers, width)
    data = torch.randn(*batch, width)
    blocks = max(1, -(-passes // AGENT_BLOCK))
    modes = (
        ("`continue` + `nan`, the UI's statistics", False, True),
        ("no watch, the UI's statistics", False, False),
        ("`continue` + `nan`, every statistic", True, True),
    )
    for label, full, watch in modes:
        token = secrets.token_urlsafe(16)
        ours, theirs = socket.socketpair()
        session: Session | None = None

        def submit(command: Command, request: int) -> None:
            assert session is not None
            session.submit(command, request)

        server = AgentServer(None, token, ServerHooks(submit=submit, quit=lambda: None))
        session = Session(None, provenance=False, full_stats=full)
        # as gradtui.agent.build attaches it: the graph and the leaves' gradients of the passes the
        # client will show, NodesRan batches; the flow only while the client shows it (this one, as
        # the UI before `w` or `P`, shows none)
        session.add_listener(
            server,
            graph=server.describes_next,
            flow=server.wants_flow,
            batches=True,
            leaves=server.wants_leaves,
            returned=server.returned,
        )
        if watch:
            session.submit(parse("break nan"))
        session.run_on()
        received, ready = Received(), threading.Event()
        reader = threading.Thread(
            target=_client,
            args=(theirs, token, (blocks + 1) * AGENT_BLOCK, received, ready, DRAWN_EVERY),
            name="bench-agent-client",
            daemon=True,
        )
        server.start()
        server.serve_connection(ours)
        reader.start()
        times: dict[str, list[float]] = {"plain": [], "agent": []}
        cpu: dict[str, list[float]] = {"plain": [], "agent": []}
        try:
            assert ready.wait(30) and received.error is None, f"the client did not attach: {received.error!r}"
            # in blocks of AGENT_BLOCK passes of each kind (one pass alone between plain ones would
            # leave the client time to say `drawn` before each: a loop's passes follow each other)
            for i in range(blocks + 1):  # the first block warms up
                for kind in ("plain",) * AGENT_BLOCK + ("agent",) * AGENT_BLOCK:
                    loss = model(data).pow(2).mean()
                    if kind == "agent":
                        session.install()
                    try:
                        used = time.thread_time()
                        start = time.perf_counter()
                        loss.backward()
                        elapsed = time.perf_counter() - start
                        used = time.thread_time() - used
                    finally:
                        if kind == "agent":
                            session.uninstall()
                        model.zero_grad(set_to_none=True)
                    if i:
                        times[kind].append(elapsed)
                        cpu[kind].append(used)
            assert received.done.wait(120), "the client never saw the last pass finish"
            assert received.error is None, f"the client failed: {received.error!r}"
            writer = _thread_cpu("gradtui-wire-writer")  # before close: the writer ends with it
        finally:
            server.close("bench done", timeout=2.0)
            reader.join(10)
            theirs.close()
        plain, agent = median(times["plain"]), median(times["agent"])
        sizes = f"{model_sizes(layers, batch, width)}, a client reading"
        add(
            Row(
                f"the UI's agent: backward in {label}",
                sizes,
                f"{ms(agent)}",
                f"{ms(plain)} plain backward",
                agent / plain,
                "-" if not watch or full or target is None else f"<= {target:.2f}x",
                None if not watch or full or target is None else agent / plain <= target,
            )
        )
        # CPU per gradtui pass, each thread on its own clock: less sensitive to other processes'
        # load than the wall time above (the writer and the reader work while plain passes run too)
        plain_cpu, agent_cpu = median(cpu["plain"]), median(cpu["agent"])
        counted = (blocks + 1) * AGENT_BLOCK
        threads = [("the script's thread, in backward()", agent_cpu)]
        if writer is not None:
            threads.append(("the agent's writer thread, per pass", writer / counted))
        threads.append(("the reader's thread (decoding in this process), per pass", received.cpu / counted))
        add(
            Row(
                "  passes sent described (the client says `drawn` as the UI does, drawing nothing)",
                sizes,
                f"{counted - server.undescribed} of {counted}; wall mean "
                f"{sum(times['agent']) / sum(times['plain']):.2f}x plain's",
                "every pass before",
                None,
                "-",
                None,
            )
        )
        for name, seconds in threads:
            add(
                Row(
                    f"  CPU: {name}",
                    sizes,
                    ms(seconds),
                    f"{ms(plain_cpu)} plain backward",
                    seconds / plain_cpu,
                    "-",
                    None,
                )
            )


def bench_agent_rows(quick: bool) -> None:
    """The agent rows at d=64 (tiny tensors, the engine's `small` rows' model) and d=256."""
    passes = 5 if quick else 25
    bench_agent_encoder(4 if quick else 12, 64, (8, 32), passes, target=None if quick else 1.30)
    bench_agent_encoder(2 if quick else 12, 256, (4, 32) if quick else (8, 128), max(3, passes // 5))
