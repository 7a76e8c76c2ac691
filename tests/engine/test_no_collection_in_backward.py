"""A hooked pass leaves the garbage collector nothing to do inside `backward()`.

The collector is off while a pass runs (gradtui.engine.session) and back on as it ends, still
inside the script's `backward()`: had the pass left more young objects alive than the youngest
generation's threshold, the first allocation after that (gradtui's own, on the way out of
`backward()`) would run a collection there, a cost the script's own timing of `backward()` sees
and a plain run does not have. Each pass used to leave its walk's ~1,300 receiver and producer
tuples, and a capture that only a collection could free. Counted, not timed: the script below
empties the young generation just before each `backward()` and allocates nothing in between,
so a collection that starts inside it is gradtui's.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

from gradtui.clients.headless import HeadlessDriver
from gradtui.engine.process.runner import ScriptRunner
from gradtui.engine.session import Session

RUN_TIMEOUT = 120.0

SCRIPT = textwrap.dedent(
    """
    import gc
    import torch
    from torch import nn

    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)  # 671 nodes a pass
    x = torch.randn(2, 4, 16)
    inside = False
    COLLECTIONS = []  # (step, generation) of each collection that starts inside backward()

    def noted(phase, info):
        if phase == "start" and inside:
            COLLECTIONS.append((step, info["generation"]))

    gc.callbacks.append(noted)
    try:
        for step in range(8):
            model.zero_grad(set_to_none=True)
            loss = model(x).pow(2).mean()
            gc.collect(0)  # the young generation emptied (a full collection would also empty the free lists)
            inside = True
            loss.backward()
            inside = False
    finally:
        gc.callbacks.remove(noted)
    print("counted steps 2-7:", [c for c in COLLECTIONS if c[0] >= 2])
    """
)


def test_a_hooked_pass_runs_no_collection_inside_backward(tmp_path: Path) -> None:
    """`gradtui --headless -c 'break nan' -c continue` as it attaches the session: every pass is
    hooked (planned, after the first pause), and from the third on (the plan reused) none runs a
    collection inside `backward()`."""
    script = tmp_path / "loop.py"
    script.write_text(SCRIPT)
    session = Session(full_stats=False)
    out = io.StringIO()
    driver = HeadlessDriver(session, ["break nan", "continue"], out, sole=True)
    session.add_listener(driver, graph=False, batches=True, flow=driver.reads_flow)  # as gradtui.cli.main adds it
    runner = ScriptRunner(str(script), [], session)
    thread = runner.start()
    thread.join(RUN_TIMEOUT)
    if thread.is_alive():
        runner.stop(5.0)
    assert not thread.is_alive(), f"the loop did not end within {RUN_TIMEOUT} s:\n{out.getvalue()}"
    assert runner.exit_status == 0, out.getvalue()
    said = out.getvalue()
    assert "pass 7 done · 671/671 nodes ran" in said, said
    assert "counted steps 2-7: []" in said, said
