"""The script's own hooks beside gradtui's: a tensor hook that doubles h's gradient, retain_grad,
a full module backward hook and pre-hook, and a hook on an autograd node, a post-accumulate-grad hook on a leaf. Two training steps;
the first keeps its graph (retain_graph=True) in the `stash` module for the test to run again.
Saves every value the hooks saw, the gradients and the hook counts to argv[1]."""

import sys

import torch

import stash

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh())
head = torch.nn.Linear(4, 2)
out = {}
seen = {"tensor_hook": [], "module": [], "module_pre": [], "node": [], "post_accumulate": []}


def tensor_hook(g):
    seen["tensor_hook"].append(g.clone())
    return g * 2


def module_hook(module, grad_input, grad_output):
    seen["module"].append([t.clone() for t in (*grad_input, *grad_output) if t is not None])


def module_pre_hook(module, grad_output):
    seen["module_pre"].append([t.clone() for t in grad_output if t is not None])


model.register_full_backward_hook(module_hook)
model.register_full_backward_pre_hook(module_pre_hook)
x = torch.randn(5, 3, requires_grad=True)
x.register_post_accumulate_grad_hook(lambda leaf: seen["post_accumulate"].append(leaf.grad.clone()))
for step in range(2):
    h = model(x)
    h.retain_grad()
    h.register_hook(tensor_hook)
    y = head(h)
    y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: seen["node"].append(
        [t.clone() for t in grad_inputs if t is not None]))
    loss = y.pow(2).sum()
    loss.backward(retain_graph=step == 0)
    out[f"h.grad.{step}"] = h.grad.clone()
    out[f"x.grad.{step}"] = x.grad.clone()
    for name, p in [*model.named_parameters(), *head.named_parameters(prefix="head")]:
        out[f"{name}.{step}"] = p.grad.clone()
    if step == 0:
        stash.items.update(model=model, h=h, loss=loss, tensor_hook=seen["tensor_hook"])
        out["hooks.0"] = torch.tensor([len(h._backward_hooks), len(model._backward_hooks),
                                       len(model._backward_pre_hooks), len(head._backward_hooks)])
for kind, calls in seen.items():
    for i, call in enumerate(calls):
        for j, t in enumerate(call if isinstance(call, list) else [call]):
            out[f"{kind}.{i}.{j}" if isinstance(call, list) else f"{kind}.{i}"] = t
torch.save(out, sys.argv[1])
