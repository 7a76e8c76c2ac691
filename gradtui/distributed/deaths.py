"""Rank 0's hub and a rank whose agent went away without a `ScriptFinished`: it is dead.

`x/RANK` goes in the job's store (gates no longer wait for it), the client is told, and every
other live rank is released (no more gates, a park or a diverge hold ends, a rank paused on its
own continues), so they end at their next collective rather than hang.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gradtui.distributed.orders import Gone, Release
from gradtui.distributed.outbox import RankOrders
from gradtui.distributed.stops import RankView, is_hold
from gradtui.protocol import events as ev
from gradtui.protocol.commands import Continue
from gradtui.wire.runtime import alive


class Deaths:
    """The hub's dead-rank bookkeeping (see module doc), over the hub's own rank views."""

    def __init__(
        self,
        ranks: list[RankView],
        store: Any,
        out: Callable[[ev.Event], None],
        orders: RankOrders,
        changed: Callable[[], None],
    ) -> None:
        self._ranks, self._store, self._out, self._orders, self._changed = ranks, store, out, orders, changed

    def gone(self, rank: int, bye: str | None) -> bool:
        """`rank`'s connection ended (under the hub's lock): done if it said so (False), else
        dead (True): the store, the client and the other ranks are told (orders left to flush)."""
        st = self._ranks[rank]
        if st.state == "done":
            return False
        st.state, st.paused, st.pause = "dead", None, None
        running = st.pid is not None and alive(st.pid)
        st.at = (
            f"its agent went away ({bye or 'connection lost'}; pid {st.pid} {'still running' if running else 'gone'})"
        )
        try:
            self._store.set(f"x/{rank}", "")
        except Exception:  # noqa: BLE001 - the store is gone too: the job is ending
            pass
        self._out(ev.Output("stderr", f"gradtui: rank {rank} died: {st.at}; releasing the other ranks\n"))
        self._changed()
        for r in self._ranks:
            if not r.live:
                continue
            self._orders.control(r.rank, Gone(rank))
            self._orders.control(r.rank, Release())  # ends a park, and a diverge hold, at once
            r.park_order = None
            if r.paused == "own" and not is_hold(r.pause):
                self._orders.submit(r.rank, Continue("continue"), None)
            r.paused = None
        return True

    def dead_now(self) -> list[int]:
        """The ranks other than 0 that the hub counts live but whose process is gone."""
        return [
            st.rank
            for st in self._ranks[1:]
            if st.state not in ("dead", "done") and st.pid is not None and not alive(st.pid)
        ]
