"""The ranks' gates in the job's store: two ranks (threads) through the gates of a few passes,
with no torchrun: the store holds a few keys per rank at the end, not one per node and pass."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import torch.distributed as dist

from gradtui.distributed.rank import RankLink
from gradtui.protocol import events as ev
from gradtui.protocol.nodes import NodeInfo
from tests.helpers import QuietSession as _Session

NODES, PASSES = 40, 5


def _pass(index: int, nodes: int = NODES) -> SimpleNamespace:
    attrs = [{"info": NodeInfo(f"op{i}", "op", nodes - i, ())} for i in range(nodes)]
    return SimpleNamespace(
        index=index, done=0, capture=SimpleNamespace(graph=SimpleNamespace(nodes=attrs), nodes=[None] * nodes)
    )


def _rank(
    link: RankLink,
    order: list[tuple[int, int, int]],
    lock: threading.Lock,
    nodes: int = NODES,
    all_reduce: threading.Barrier | None = None,
) -> None:
    """One rank's passes; `all_reduce`: after its last node the rank waits for every rank's
    last node, as DDP's final callback waits for its all-reduce, before its PassFinished."""
    for index in range(PASSES):
        state = _pass(index, nodes)
        for node in range(nodes):
            state.done = node
            assert link.follow(state, node) is None
            with lock:
                order.append((link.rank, index, node))
        if all_reduce is not None:
            all_reduce.wait(30)
        link.on_event(ev.PassFinished(index, nodes, nodes, None))


def _run(links: list[RankLink], order: list, lock: threading.Lock, **kwargs) -> None:
    threads = [
        threading.Thread(target=_rank, args=(link, order, lock), kwargs=kwargs[str(link.rank)], daemon=True)
        for link in links
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a rank is stuck at a gate"


def test_the_ranks_keep_step_and_the_store_holds_a_few_keys_per_rank():
    store = dist.HashStore()
    order: list[tuple[int, int, int]] = []
    lock = threading.Lock()
    links = [RankLink(_Session(), store, rank, 2) for rank in range(2)]
    _run(links, order, lock, **{"0": {}, "1": {}})
    assert len(order) == 2 * NODES * PASSES
    # No rank ever ran a node more than one gate ahead of the other.
    done = {0: -1, 1: -1}
    for rank, index, node in order:
        done[rank] = index * NODES + node
        assert done[rank] - done[1 - rank] <= 1
    # Per rank: its last two gates and one `d/` mark per pass (not NODES x PASSES gate keys).
    assert store.num_keys() <= 2 * (2 + PASSES)


def test_ranks_whose_graphs_differ_pass_every_gate():
    """Rank 1 has nodes of its own (a rank-specific branch): rank 0, done with its nodes, waits
    for the all-reduce that rank 1 launches at its last node; rank 1 must not wait at a gate
    rank 0 never reaches."""
    store = dist.HashStore()
    order: list[tuple[int, int, int]] = []
    lock = threading.Lock()
    links = [RankLink(_Session(), store, rank, 2) for rank in range(2)]
    all_reduce = threading.Barrier(2)
    _run(links, order, lock, **{"0": {"all_reduce": all_reduce}, "1": {"nodes": NODES + 3, "all_reduce": all_reduce}})
    assert not all_reduce.broken and len(order) == (2 * NODES + 3) * PASSES
