"""Module paths from the outermost module that is running: its forward, or a
method called on it from outside (Lightning's `training_step` calling `self.net(x)`, a
trainer's loop calling `model.compute_loss`), the same root that parameter names are relative
to (`net.2.bias` is made in module `net.2`)."""

from __future__ import annotations

import textwrap

import torch
import torch.nn as nn
import torch.nn.functional as F

from gradtui.engine.capture.graph import Names, capture
from gradtui.engine.provenance.forward import Provenance
from gradtui.protocol import events as ev
from tests.helpers import run_headless


class Lit(nn.Module):
    """A LightningModule's shape, in torch.nn only: a trainer calls `training_step`, not forward."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))

    def training_step(self, batch):
        x, y = batch
        return F.mse_loss(self.net(x), y)


class Wrapper(nn.Module):
    """A wrapper whose method calls a method of the model it holds."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def compute_loss(self, batch):
        return self.model.training_step(batch)


def _fit(module, method: str, batch):
    """A trainer's loop, outside any module: it calls a method of the module, never forward."""
    loss = getattr(module, method)(batch)
    loss.backward()
    return loss


def _modules_and_params(loss, scope: dict) -> tuple[set, set]:
    cap = capture([loss.grad_fn], Names.from_scopes(scope))
    modules = {a.module for a in cap.infos if a.kind != "accumulate"}
    params = {a.param for a in cap.infos if a.kind == "accumulate"}
    return modules, params


def test_a_method_called_on_a_module_from_outside_names_paths_from_that_module():
    torch.manual_seed(0)
    model = Lit()
    batch = (torch.randn(5, 3), torch.randn(5, 1))
    with Provenance():
        loss = _fit(model, "training_step", batch)
    modules, params = _modules_and_params(loss, {"model": model})
    assert {"net.0", "net.1", "net.2"} <= modules and not modules & {"0", "1", "2"}
    assert {"net.0.weight", "net.2.bias"} <= params


def test_the_outermost_running_module_is_the_root_through_nested_methods():
    torch.manual_seed(0)
    wrapper = Wrapper(Lit())
    batch = (torch.randn(5, 3), torch.randn(5, 1))
    with Provenance():
        loss = _fit(wrapper, "compute_loss", batch)
    modules, params = _modules_and_params(loss, {"wrapper": wrapper})
    assert {"model.net.0", "model.net.2"} <= modules and not modules & {"0", "2", "net.0", "net.2"}
    assert "model.net.2.bias" in params


def test_a_module_that_a_running_method_does_not_hold_is_its_own_root():
    torch.manual_seed(0)
    other = nn.Linear(3, 1)

    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def run(self, x):
            return other(self.fc(x))

    holder = Holder()
    with Provenance():
        out = holder.run(torch.randn(2, 3))
    cap = capture([out.grad_fn], Names.from_scopes({"holder": holder, "other": other}))
    assert {a.module for a in cap.infos if a.kind != "accumulate"} == {"holder.fc", "other"}


TRAINER_SCRIPT = textwrap.dedent("""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Lit(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))

        def training_step(self, batch):
            x, y = batch
            return F.mse_loss(self.net(x), y)

    class Trainer:
        def fit(self, module, batches):
            opt = torch.optim.SGD(module.parameters(), lr=0.1)
            for batch in batches:
                opt.zero_grad()
                module.training_step(batch).backward()
                opt.step()

    torch.manual_seed(0)
    model = Lit()
    Trainer().fit(model, [(torch.randn(5, 3), torch.randn(5, 1)) for _ in range(2)])
""")


def test_break_module_hits_the_path_parameter_names_use(tmp_path):
    path = tmp_path / "lit.py"
    path.write_text(TRAINER_SCRIPT)
    run = run_headless(str(path), ["break module net.2", "continue", "continue"])
    assert run.status == 0, run.output
    hits = run.of(ev.BreakpointHit)
    assert [(h.spec, h.pass_index) for h in hits] == [("module net.2", 0), ("module net.2", 1)], run.output
    report = run.report.to_json()
    nodes = report["passes"][0]["nodes"]
    assert {n["module"] for n in nodes if n["module"]} == {"net.0", "net.1", "net.2"}
    assert {n["param"] for n in nodes if n["param"]} >= {"net.2.bias", "net.0.weight"}
    assert next(n for n in nodes if n["id"] == hits[0].node)["module"] == "net.2"
