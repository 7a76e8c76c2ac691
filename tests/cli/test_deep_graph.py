"""A 100,000-node chain: freeing it after gradtui has seen it recursed once per
node through the nodes' Python wrappers and overflowed the stack (SIGSEGV, no report)."""

from __future__ import annotations

import json

import pytest

from tests.processes import gradtui

pytestmark = pytest.mark.timeout(170)

DEEP = """\
import torch
x = torch.ones(1, requires_grad=True)
y = x
for _ in range(100_000):
    y = y * 1.0
y.backward()
print("grad", x.grad.item())
del y  # the graph dies here, while the script still runs
print("freed")
"""


def test_a_100000_node_chain_exits_0_with_its_report(tmp_path):
    path = tmp_path / "deep.py"
    path.write_text(DEEP, encoding="utf-8")
    report = tmp_path / "r.json"
    done = gradtui("--headless", "-c", "continue", "--report", str(report), str(path), timeout=160)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "grad 1.0" in done.stdout and "freed" in done.stdout
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["exit_status"] == 0
    assert len(data["passes"][0]["nodes"]) == 100_001
