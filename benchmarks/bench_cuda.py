"""The CUDA rows: backward under gradtui on a GPU as a ratio to plain CUDA backward, and the host
syncs gradtui adds per pass.

    python benchmarks/bench_cuda.py [--quick] [--json PATH]

Models: the d=64 and d=256 nn.TransformerEncoder of bench_models.transformer (12 layers) and
a GPT-2-style model of 4 layers at d=256 (bench_models.gpt). For each: plain backward,
gradtui in `continue` with a `nan` watch and the UI's statistics (norms), and in `continue` with
a `nan` watch and every statistic (a report's; a listener that reads every node and the flow).
The runs alternate; each pass is timed from `backward()` to `torch.cuda.synchronize()` after it
(wall time: the GPU's time is not the thread's CPU time), its forward built outside the timed
region; medians.

Host syncs per pass are counted two ways, in one extra pass of each kind: torch's own sync
detector (`torch.cuda.set_sync_debug_mode("warn")`: one warning per synchronising call torch
makes, on any thread) and tests.helpers.HostReads (the Python calls that read a tensor back:
`.item()`, `.tolist()`, `.cpu()` of a CUDA tensor...), counted on every thread, since CUDA nodes'
hooks run on autograd's device thread, not the caller's.

Without CUDA it writes a result that says so, with no rows, and exits 0 (gpu_check.sh runs it
on any machine).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import torch  # noqa: E402
from bench_models import gpt, model_sizes, transformer  # noqa: E402

from gradtui.engine.session import Session  # noqa: E402
from gradtui.protocol.commands import parse  # noqa: E402

SYNC_WARNING = "called a synchronizing CUDA operation"
"""The text of the warning torch's sync debug mode gives for each synchronising call."""


class _AnyThread(set):
    """A thread set that holds every thread: HostReads counts on all of them (autograd runs a
    CUDA node's hooks on its device thread)."""

    def __contains__(self, _thread: object) -> bool:
        return True


def _session(full: bool) -> Session:
    """A session in `continue` with a `nan` watch, as bench.py's backward rows build it: norms and
    the batches unread (`full=False`), or every statistic, every node and the flow read."""
    session = Session(None, provenance=False, full_stats=full)
    session.add_listener(lambda e: None, graph=False, batches=not full, flow=full)
    session.submit(parse("break nan"))
    session.run_on()
    return session


def _sync(device: torch.device) -> None:
    """Wait for the device's queued work (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _cases(quick: bool, cuda: torch.device) -> list[tuple[str, Any, Callable[[], torch.Tensor]]]:
    """(row name, model, a callable that makes one pass's loss) on device `cuda`."""
    cases = []
    for width, batch in ((64, (8, 32)), (256, (8, 128))):
        layers = 4 if quick else 12
        model = transformer(layers, width).to(cuda)
        data = torch.randn(*batch, width, generator=torch.Generator().manual_seed(1)).to(cuda)
        cases.append((model_sizes(layers, batch, width), model, lambda m=model, d=data: m(d).pow(2).mean()))
    model = gpt(4, 256).to(cuda)
    ids = torch.randint(0, 1024, (8, 128), generator=torch.Generator().manual_seed(1)).to(cuda)
    targets = torch.roll(ids, -1, 1)

    def gpt_loss(m=model) -> torch.Tensor:
        logits = m(ids)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())

    cases.append(("GPT-2-style, 4 layers d=256, batch 8x128 tokens", model, gpt_loss))
    return cases


def _timed(model: Any, loss_of: Callable[[], torch.Tensor], session: Session | None, device: torch.device) -> float:
    """Wall seconds of one pass, from `backward()` until the device has finished it."""
    loss = loss_of()
    _sync(device)
    if session is not None:
        session.install()
    try:
        start = time.perf_counter()
        loss.backward()
        _sync(device)
        return time.perf_counter() - start
    finally:
        if session is not None:
            session.uninstall()
        model.zero_grad(set_to_none=True)


def _syncs(
    model: Any, loss_of: Callable[[], torch.Tensor], session: Session | None, device: torch.device
) -> dict[str, Any]:
    """One pass's synchronising calls: torch's detector (CUDA only) and the Python host reads."""
    from tests.helpers import HostReads

    cuda = device.type == "cuda"
    loss = loss_of()
    _sync(device)
    if session is not None:
        session.install()
    if cuda:
        torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught, HostReads(_AnyThread()) as reads:
            warnings.simplefilter("always")
            loss.backward()
            _sync(device)
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
        if session is not None:
            session.uninstall()
        model.zero_grad(set_to_none=True)
    return {
        "torch_syncs": sum(SYNC_WARNING in str(w.message) for w in caught) if cuda else None,
        "host_reads": reads.total,
        "host_read_kinds": dict(reads.counts),
    }


def run(quick: bool, device: torch.device) -> dict[str, Any]:
    """Every CUDA row (or, without CUDA, a result that says why there are none). `device` cpu
    runs the same rows on the CPU: a check of this code on a machine with no GPU, not a figure."""
    result: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(), "rows": []}
    if device.type == "cpu":
        result["cuda"], result["device"], result["compiled_posthooks"] = "none", "cpu (a smoke run)", "-"
    elif not torch.cuda.is_available():
        result["cuda"] = None
        result["skipped"] = "CUDA is not available on this machine (torch.cuda.is_available() is False): no CUDA rows"
        return result
    else:
        from gradtui.engine.hooks import native

        result["cuda"] = torch.version.cuda
        result["device"] = torch.cuda.get_device_name(device)
        result["compiled_posthooks"] = "built" if native.load().module is not None else native.load().reason
    repeat = 5 if quick else 30
    for name, model, loss_of in _cases(quick, device):
        sessions = {"plain": None, "nan": _session(False), "every statistic": _session(True)}
        times: dict[str, list[float]] = {kind: [] for kind in sessions}
        for i in range(repeat + 3):  # the first three warm up (kernels, the plan cache)
            for kind, session in sessions.items():
                elapsed = _timed(model, loss_of, session, device)
                if i >= 3:
                    times[kind].append(elapsed)
        plain = statistics.median(times["plain"])
        for kind, label in (
            ("nan", "`continue` + `nan`, the UI's statistics"),
            ("every statistic", "`continue` + `nan`, every statistic"),
        ):
            ours = statistics.median(times[kind])
            result["rows"].append(
                {
                    "model": name,
                    "mode": label,
                    "ms": round(ours * 1e3, 3),
                    "plain_ms": round(plain * 1e3, 3),
                    "ratio": round(ours / plain, 3),
                    **_syncs(model, loss_of, sessions[kind], device),
                }
            )
        result["rows"].append(
            {
                "model": name,
                "mode": "plain backward (the baseline)",
                "ms": round(plain * 1e3, 3),
                "plain_ms": round(plain * 1e3, 3),
                "ratio": 1.0,
                **_syncs(model, loss_of, None, device),
            }
        )
    return result


def markdown(result: dict[str, Any]) -> str:
    """The result as a markdown section."""
    lines = ["## CUDA rows", ""]
    if result.get("cuda") is None:
        return "\n".join([*lines, result["skipped"], ""])
    lines += [
        f"{result['device']}, CUDA {result['cuda']}, torch {result['torch']}, Python {result['python']}; "
        f"compiled posthooks: {result['compiled_posthooks']}. Wall time of `backward()` to "
        "`torch.cuda.synchronize()`, medians, runs alternated; syncs counted in one extra pass.",
        "",
        "| model | mode | gradtui ms | plain ms | ratio | torch syncs / pass | host reads / pass |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['model']} | {r['mode']} | {r['ms']:.2f} | {r['plain_ms']:.2f} | {r['ratio']:.2f}x "
            f"| {'-' if r['torch_syncs'] is None else r['torch_syncs']} | {r['host_reads']} |"
        )
    return "\n".join([*lines, ""])


def main() -> int:
    """Run the rows, print them as markdown, write the JSON where asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4-layer encoders, 5 pairs")
    parser.add_argument("--json", type=Path, help="also write the result as JSON here")
    parser.add_argument(
        "--device", default="cuda", help="cuda (default); cpu: run the rows' code on the CPU, a smoke run"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = run(args.quick, torch.device(args.device))
    print(markdown(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
