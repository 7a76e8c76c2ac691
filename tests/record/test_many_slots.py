"""What the writer writes, the reader reads: a node with 100,000 gradient slots (torch.stack of
100,000 parameters) recorded, then read back whole and undamaged (the reader once refused any
slot past 4,096 as damage, which the writer never limited)."""

from __future__ import annotations

import os

import pytest
import torch

from gradtui.protocol.nodes import INFO
from gradtui.record.reader import Recording
from tests.helpers import script
from tests.processes import gradtui

pytestmark = pytest.mark.timeout(300)

PARAMS = 100_000


def test_a_node_with_100000_slots_is_read_back_as_it_was_recorded(tmp_path):
    path = os.path.join(tmp_path, "stack.db")
    run = gradtui(
        "--headless",
        "--record-all",
        "-c",
        "continue",
        "--record",
        path,
        script("stacked_params.py"),
        str(PARAMS),
        timeout=240,
    )
    assert run.returncode == 0, run.stderr
    params = [torch.nn.Parameter(torch.tensor(float(i))) for i in range(PARAMS)]  # torch, the oracle
    torch.stack(params).sum().backward()
    recording = Recording(path)
    try:
        graph = recording.graph(0)
        stack = next(n for n, data in graph.nodes(data=True) if data[INFO].name == "StackBackward0")
        sent = recording.stats(0)[stack].grad_inputs
        assert recording.damage == []
        assert len(sent) == PARAMS
        assert [s.values for s in sent] == [tuple(p.grad.reshape(-1).tolist()) for p in params]
    finally:
        recording.close()
