"""Autograd features that call backward in unusual ways: reentrant and non-reentrant
checkpointing (a backward inside a backward), double backward (create_graph), a retained graph
run twice, `inputs=`, a bare tensor to torch.autograd.backward, backward on a leaf.
Saves every gradient to argv[1]."""

import sys

import torch
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
w = torch.randn(4, 4, requires_grad=True)
x = torch.randn(3, 4, requires_grad=True)
out = {}


def block(t):
    return torch.tanh(t @ w)


# 1. checkpointing, both flavours
for reentrant in (True, False):
    loss = checkpoint(block, x, use_reentrant=reentrant).pow(2).sum()
    loss.backward()
    out[f"w.ckpt{reentrant}"], out[f"x.ckpt{reentrant}"] = w.grad.clone(), x.grad.clone()
    w.grad = x.grad = None

# 2. double backward: a gradient penalty
y = block(x).sum()
(gx,) = torch.autograd.grad(y, x, create_graph=True)
penalty = gx.pow(2).sum()
penalty.backward()
out["w.penalty"], out["x.penalty"] = w.grad.clone(), x.grad.clone()
w.grad = x.grad = None

# 3. a retained graph, backward twice (gradients accumulate)
loss = block(x).exp().sum()
loss.backward(retain_graph=True)
loss.backward()
out["w.twice"], out["x.twice"] = w.grad.clone(), x.grad.clone()
w.grad = x.grad = None

# 4. only some inputs; a bare tensor to torch.autograd.backward
block(x).sum().backward(inputs=[w])
assert x.grad is None
out["w.inputs"] = w.grad.clone()
w.grad = None
torch.autograd.backward(block(x).mean())
out["w.bare"], out["x.bare"] = w.grad.clone(), x.grad.clone()

# 5. backward on a leaf itself
leaf = torch.randn(5, requires_grad=True)
leaf.backward(torch.arange(5.0))
out["leaf"] = leaf.grad.clone()

torch.save(out, sys.argv[1])
