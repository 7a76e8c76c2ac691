"""Cross-rank checks: `break diverge`, gradients that differ across ranks after their all-reduce.

After DDP's all-reduce every rank must hold the same parameter gradients, bit for bit; one
that differs is a desync bug (or an edit through `no_sync`). With `break diverge` armed, at
the end of every pass each rank hashes every parameter gradient of the pass (blake2b of its
bytes; a DTensor's local shard is its own, so FSDP2's shards are not compared), writes the
hashes to the job's store (`v/PASS/RANK`) and reads every rank's. For the first parameter (in
engine order) whose hashes differ, the ranks exchange that gradient (`vt/PASS/RANK`), and
each computes the max abs difference from every other rank's. The rank(s) whose hash differs
from the most ranks' are named. Then every rank holds after that pass, its script stopped
right after `backward()` returned: a `Paused` at the parameter's accumulator (phase `after`)
that `continue` / `step` / `finish` end, `print` answers with the differences, `quit` stops.
"""

from __future__ import annotations

import hashlib
import json
import queue
from collections import Counter
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch

from gradtui.distributed.stops import HOLD, resume_holds
from gradtui.engine.intercept import GradtuiQuit
from gradtui.engine.stats.summary import summarize_all
from gradtui.protocol import events as ev
from gradtui.protocol.commands import (
    Break,
    Command,
    Continue,
    Delete,
    Finish,
    ListBreakpoints,
    Print,
    Quit,
    Step,
)

if TYPE_CHECKING:  # the session imports the engine; only its type is needed here
    from gradtui.distributed.rank import RankLink
    from gradtui.engine.session import Session

WAIT = timedelta(seconds=0.2)


def local_of(grad: torch.Tensor) -> torch.Tensor:
    """A gradient as this rank holds it: a DTensor's local shard, never gathered."""
    to_local = getattr(grad, "to_local", None)
    return to_local() if callable(to_local) else grad


def digest(grad: torch.Tensor) -> str:
    """A hash of a gradient's bytes (its local shard's)."""
    t = local_of(grad).detach().cpu().contiguous()
    return hashlib.blake2b(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"", digest_size=16).hexdigest()


class Checks:
    """The diverge check of one rank, and its hold after a pass (see module doc)."""

    def __init__(self, session: Session, store: torch.distributed.Store, rank: int, world: int, link: RankLink) -> None:
        self.session, self.store, self.rank, self.world, self.link = session, store, rank, world, link
        self.diverge = False
        self.held = False
        self._commands: queue.Queue[tuple[Command, int]] = queue.Queue()
        self._report = ""

    def on_event(self, event: ev.Event) -> None:
        """At the end of a pass with `diverge` armed: compare, and hold if a gradient differs."""
        if not (self.diverge and isinstance(event, ev.PassFinished) and event.error is None):
            return
        found = self._compare(event.pass_index)
        if found is not None:
            node, reason, grads = found
            self._hold(event, node, reason, grads)

    def _exchange(self, key: str, value: bytes) -> dict[int, bytes]:
        """Write our `value` under `key/RANK`, read every live rank's."""
        self.store.set(f"{key}/{self.rank}", value)  # type: ignore[arg-type]  # c10d stores bytes too; its stub says str
        got: dict[int, bytes] = {self.rank: value}
        for r in range(self.world):
            if r == self.rank:
                continue
            while r not in self.link.gone:
                try:
                    self.store.wait([f"{key}/{r}"], WAIT)
                    got[r] = self.store.get(f"{key}/{r}")
                    break
                except Exception:  # noqa: BLE001 - a slice of the wait ran out
                    if self.link.passed(-1, r) or self.session.quitting:
                        break
        return got

    def _compare(self, index: int) -> tuple[int, str, tuple[Any, ...]] | None:
        leaves = []
        for node, name, ref in self.link.leaves:
            leaf = ref()
            grad = getattr(leaf, "grad", None)
            if grad is not None and not callable(getattr(grad, "to_local", None)):
                leaves.append((node, name, grad))
        mine = {name: digest(grad) for _, name, grad in leaves}
        hashes = {r: json.loads(v) for r, v in self._exchange(f"v/{index}", json.dumps(mine).encode()).items()}
        for node, name, grad in leaves:
            seen = {r: h.get(name) for r, h in hashes.items()}
            if len(set(seen.values())) < 2:
                continue
            tensors = self._exchange(f"vt/{index}", _to_bytes(grad))
            local = grad.detach().cpu()
            diffs = {}
            for r, data in tensors.items():
                if r != self.rank:
                    other = torch.frombuffer(bytearray(data), dtype=local.dtype).reshape(local.shape) if data else None
                    diffs[r] = (
                        float((other.double() - local.double()).abs().max()) if other is not None else float("nan")
                    )
            counts = Counter(seen.values())
            top = counts.most_common(1)[0][1]
            odd = sorted(r for r, h in seen.items() if counts[h] < top) or sorted(r for r in seen if r != 0)
            worst = max(diffs.values(), default=0.0)
            which = ", ".join(f"rank {r}" for r in odd)
            reason = (
                f"{HOLD}{name} differs across ranks after its all-reduce: {which} "
                f"(max abs difference {worst:.6g} from this rank, rank {self.rank})"
            )
            self._report = "\n".join(
                [reason, *(f"  vs rank {r}: max abs difference {d:.6g}" for r, d in sorted(diffs.items()))]
            )
            return node, reason, (grad,)
        return None

    def _hold(self, finished: ev.PassFinished, node: int, reason: str, grads: tuple[Any, ...]) -> None:
        """Hold the script here (after backward) until a resuming command or quit."""
        self.held = True
        self.link.timeouts.raise_()
        try:
            self.session.emit(
                ev.Paused(
                    finished.pass_index,
                    node,
                    "AccumulateGrad",
                    "after",
                    reason,
                    summarize_all(grads, histogram=True),
                    finished.done,
                    finished.total,
                )
            )
            while True:
                try:
                    queued: tuple[Command, int] | None = self._commands.get(timeout=0.25)
                except queue.Empty:
                    queued = None
                if self.session.quitting:
                    raise GradtuiQuit()
                if queued is None:
                    # Every rank holds after the same pass; the client's resume reaches those the
                    # hub knew were held. A rank whose hold began after that follows the one that
                    # resumed, through the store.
                    if (mode := self._resumed(finished.pass_index)) is not None:
                        return self._resume(finished, mode)
                    if self.link.released:  # a rank died: the others are let go at once
                        return self._resume(finished, "continue")
                    continue
                command, request = queued
                text = command.text
                match command:
                    case Continue() | Step() | Finish():
                        mode = "continue" if isinstance(command, Continue) else "step"
                        resume_holds(self.store, finished.pass_index, mode)  # the ranks whose hold began later
                        return self._resume(finished, mode)
                    case Quit():
                        self.session.run_quit.quit()  # its way out ends by stopping the session: seen above
                    case Print():
                        self.session.emit(ev.CommandResult(text, self._report, request=request))
                    case Break() | Delete() | ListBreakpoints():
                        self.session.submit(command, request)  # they take effect while running, too
                    case _:
                        self.session.emit(
                            ev.CommandResult(
                                text,
                                "held after the pass by break diverge: continue, step, finish, print, "
                                "quit, break, delete or breakpoints",
                                ok=False,
                                request=request,
                            )
                        )
        finally:
            self.held = False
            self.link.timeouts.restore()

    def submit(self, command: Command, request: int) -> None:
        """A command for the hold (from the agent's command path)."""
        self._commands.put((command, request))

    def _resume(self, finished: ev.PassFinished, mode: str) -> None:
        """End the hold: run on, or step (at the next pass's first node: none is left in this one)."""
        self.session.run_on()
        if mode == "step":
            self.session.step_next_pass()
        self.session.emit(ev.Resumed(finished.pass_index, mode))

    def _resumed(self, index: int) -> str | None:
        """How another rank resumed its hold after pass `index` (None: none has yet); "continue"
        once the job's store is gone (its launcher ended: nothing could resume this hold)."""
        try:
            if self.store.check([f"vr/{index}"]):
                return self.store.get(f"vr/{index}").decode()
        except Exception:  # noqa: BLE001 - the store is gone with the job
            return "continue"
        return None


def _to_bytes(grad: torch.Tensor) -> bytes:
    t = grad.detach().cpu().contiguous()
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
