"""The UI's agent with clients that say what they drew, beside one that does not, in one process.

`python benchmarks/bench_paced.py [ROUNDS [BLOCK]]`: the d=64 12-layer encoder (batch 8x32), `continue` +
`nan`, the UI's statistics. The engine with a listener that reads nothing (the floor), and three
agents as gradtui.agent.build attaches the UI's (AgentServer, a client on a socketpair decoding in
a thread): one whose client never says `drawn` (every pass described to it, as before clients
paced); one whose client says it as the UI does, after each described pass's end, DRAWN_EVERY
after the last at the soonest (a UI that draws in no time); one whose client says it once, after
the first pass (every later pass undescribed: what such a pass costs). Each round runs BLOCK
consecutive passes of each kind (a training loop's passes follow each other), the kinds' order
rotating round by round; the forward is built outside the timing. Prints the medians of wall and
thread time of `backward()` over plain (and the wall time's mean over plain's: a described pass
costs more than the typical one, the median), and the passes each client was sent described.
"""

from __future__ import annotations

import math
import os
import secrets
import socket
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_agent import Received, _client  # noqa: E402
from bench_models import transformer  # noqa: E402
from benchtable import median  # noqa: E402

from gradtui.agent.server import AgentServer, ServerHooks  # noqa: E402
from gradtui.engine.session import Session  # noqa: E402
from gradtui.protocol.commands import parse  # noqa: E402
from gradtui.wire.frames import DRAWN_EVERY  # noqa: E402

BLOCK = 20
"""Consecutive passes of one kind in a round (1: the kinds alternate pass by pass, which follows
the machine's load best, but leaves a paced client time to say `drawn` between two of its
passes: more of them are described than in a loop)."""


class Served:
    """One agent as the UI's is attached, its client reading on a thread (`every`: how it says
    `drawn`, bench_agent._client's)."""

    def __init__(self, passes: int, rounds: int, every: float | None) -> None:
        token = secrets.token_urlsafe(16)
        ours, self.theirs = socket.socketpair()
        self.server = AgentServer(None, token, ServerHooks(submit=lambda c, r: None, quit=lambda: None))
        self.session = Session(None, provenance=False, full_stats=False)
        server = self.server
        self.session.add_listener(
            server,
            graph=server.describes_next,
            flow=server.wants_flow,
            batches=True,
            leaves=server.wants_leaves,
            returned=server.returned,
        )
        self.session.submit(parse("break nan"))
        self.session.run_on()
        self.received, ready = Received(), threading.Event()
        passes += passes // rounds  # the warm-up round's
        self.reader = threading.Thread(
            target=_client, args=(self.theirs, token, passes, self.received, ready, every), daemon=True
        )
        server.start()
        server.serve_connection(ours)
        self.reader.start()
        assert ready.wait(30) and self.received.error is None

    def close(self) -> None:
        assert self.received.done.wait(120), "the client never saw the last pass finish"
        self.server.close("bench done", timeout=2.0)
        self.reader.join(10)
        self.theirs.close()


def _engine_alone() -> Session:
    """The engine with a listener that reads nothing (the bench's `small` row): the floor."""
    session = Session(None, provenance=False, full_stats=False)
    session.add_listener(lambda event: None, graph=False, flow=False, batches=True)
    session.submit(parse("break nan"))
    session.run_on()
    return session


def main() -> None:
    """Run the rounds and print the figures (see module doc)."""
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    block = int(sys.argv[2]) if len(sys.argv) > 2 else BLOCK
    model = transformer(12, 64)
    data = torch.randn(8, 32, 64)
    counted = rounds * block
    agents = {
        "every pass": Served(counted, rounds, None),
        "paced as the UI": Served(counted, rounds, DRAWN_EVERY),
        "paced, drawn once": Served(counted, rounds, math.inf),
    }
    sessions: dict[str, Session | None] = {"plain": None, "engine alone": _engine_alone()}
    sessions.update({name: served.session for name, served in agents.items()})
    wall: dict[str, list[float]] = {k: [] for k in sessions}
    cpu: dict[str, list[float]] = {k: [] for k in sessions}
    names = list(sessions)
    for i in range(rounds + 1):  # the first round warms up
        for kind in names[i % len(names) :] + names[: i % len(names)]:
            session = sessions[kind]
            for _ in range(block):  # consecutive passes, as a training loop's
                loss = model(data).pow(2).mean()
                if session is not None:
                    session.install()
                try:
                    used, start = time.thread_time(), time.perf_counter()
                    loss.backward()
                    elapsed, used = time.perf_counter() - start, time.thread_time() - used
                finally:
                    if session is not None:
                        session.uninstall()
                    model.zero_grad(set_to_none=True)
                if i:
                    wall[kind].append(elapsed)
                    cpu[kind].append(used)
    for served in agents.values():
        served.close()
    plain_wall, plain_cpu = median(wall["plain"]), median(cpu["plain"])
    print(
        f"load average {os.getloadavg()[0]:.1f}; {rounds} rounds of {block} passes each; plain backward "
        f"{plain_wall * 1e3:.1f} ms wall, {plain_cpu * 1e3:.1f} ms thread"
    )
    for kind in names[1:]:
        mean = sum(wall[kind]) / len(wall[kind]) / (sum(wall["plain"]) / len(wall["plain"]))
        line = (
            f"{kind}: wall {median(wall[kind]) / plain_wall:.2f}x (mean {mean:.2f}x), "
            f"the script's thread {median(cpu[kind]) / plain_cpu:.2f}x"
        )
        served = agents.get(kind)
        if served is not None:
            total = counted + block  # the warm-up round's passes too
            line += (
                f", the reader's CPU per pass {served.received.cpu / total / plain_cpu:.2f}x, "
                f"{total - served.server.undescribed} of {total} passes described"
            )
        print(line)


if __name__ == "__main__":
    main()
