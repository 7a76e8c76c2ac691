"""The ranks' gates in the job's store: two ranks (threads) through the gates of a few passes,
with no torchrun: the store holds a few keys per rank at the end, not one per node and pass."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import torch.distributed as dist

from gradtui.model import events as ev
from gradtui.distributed.rank import RankLink

NODES, PASSES = 40, 5


class _Session:
    quitting = False
    paused = False
    breakpoints = ()

    def emit(self, event: ev.Event) -> None:
        pass


def _pass(index: int) -> SimpleNamespace:
    attrs = [{"kind": "op", "name": f"op{i}"} for i in range(NODES)]
    return SimpleNamespace(index=index, capture=SimpleNamespace(graph=SimpleNamespace(nodes=attrs), nodes=[None] * NODES))


def _rank(link: RankLink, order: list[tuple[int, int, int]], lock: threading.Lock) -> None:
    for index in range(PASSES):
        state = _pass(index)
        for node in range(NODES):
            assert link.follow(state, node) is None
            with lock:
                order.append((link.rank, index, node))
        link.on_event(ev.PassFinished(index, NODES, NODES, None))


def test_the_ranks_keep_step_and_the_store_holds_a_few_keys_per_rank():
    store = dist.HashStore()
    order: list[tuple[int, int, int]] = []
    lock = threading.Lock()
    links = [RankLink(_Session(), store, rank, 2) for rank in range(2)]
    threads = [threading.Thread(target=_rank, args=(link, order, lock), daemon=True) for link in links]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a rank is stuck at a gate"
    # No rank ever ran a node more than one gate ahead of the other.
    done = {0: -1, 1: -1}
    for rank, index, node in order:
        done[rank] = index * NODES + node
        assert done[rank] - done[1 - rank] <= 1
    # Per rank: its last two gates and one `d/` mark per pass (not NODES x PASSES gate keys).
    assert store.num_keys() <= 2 * (2 + PASSES)
