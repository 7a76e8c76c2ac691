"""A backward run inside another pass's hook: the script's tensor hook calls
torch.autograd.grad on a graph of its own while the outer pass runs."""

import sys

import torch

torch.manual_seed(0)
x = torch.randn(3, requires_grad=True)
w = torch.randn(3, requires_grad=True)
h = x * w
inner = {}


def hook(g):
    with torch.enable_grad():
        u = torch.ones(3, requires_grad=True)
        (gu,) = torch.autograd.grad((u * g.detach()).pow(2).sum(), u)
    inner["u"] = gu
    return g * 2


h.register_hook(hook)
loss = torch.exp(h).sum()
loss.backward()
torch.save({"x": x.grad, "w": w.grad, "u": inner["u"]}, sys.argv[1])
