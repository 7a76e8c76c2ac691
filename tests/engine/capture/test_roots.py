"""Several top-level models: module paths and parameter names are unique across
the root modules in scope, led by each root's variable (`netG.0`, `netG.0.weight`)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch import nn

from gradtui.engine.capture.graph import Names
from gradtui.protocol import events as ev
from tests.helpers import run_headless, script

pytestmark = pytest.mark.timeout(120)

PARAMS = {f"{net}.{i}.{kind}" for net in ("netG", "netD") for i in (0, 2) for kind in ("weight", "bias")}


def test_two_models_have_unique_paths_and_names_and_break_module_pauses():
    run = run_headless(script("gan.py"), ["break module netG", "continue", "continue", "continue"])
    assert run.status == 0, run.output
    started = run.of(ev.PassStarted)
    assert len(started) == 4
    d_step, g_step = started[0].graph, started[1].graph
    assert {d.param for _, d in g_step.nodes(data="info") if d.param} == PARAMS
    assert {d.param for _, d in d_step.nodes(data="info") if d.param} == {p for p in PARAMS if p.startswith("netD")}
    modules = {d.module for _, d in g_step.nodes(data="info")}
    assert {"netG.0", "netG.2", "netD.0", "netD.2", "criterion"} <= modules
    # `break module netG` pauses in each G step (passes 1 and 3), at a node of netG.
    hits = run.of(ev.BreakpointHit)
    assert [h.pass_index for h in hits] == [1, 3]
    assert all(started[h.pass_index].graph.nodes[h.node]["info"].module.startswith("netG.") for h in hits)
    for finished in run.of(ev.PassFinished):
        names = Counter(r.name for r in finished.flow)
        assert names and max(names.values()) == 1, names


def test_one_model_keeps_its_short_names():
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    fc = model[0]  # an alias of a submodule is not a second root
    names = Names.from_scopes({"model": model, "fc": fc, "loss_fn": nn.MSELoss(), "x": torch.ones(1)})
    assert not names.several_roots
    assert sorted(names.params.values()) == ["0.bias", "0.weight"]


def test_two_roots_in_scope_lead_names_by_their_variables():
    a, b = nn.Sequential(nn.Linear(2, 2)), nn.Linear(2, 2)
    names = Names.from_scopes({"a": a, "b": b})
    assert names.several_roots
    assert sorted(names.params.values()) == ["a.0.bias", "a.0.weight", "b.bias", "b.weight"]
