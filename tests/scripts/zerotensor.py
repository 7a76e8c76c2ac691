"""Backward formulas that send ZeroTensors (storage-less all-zero gradients): sgn, and abs,
normalize and l1_loss at double backward. Saves every leaf gradient to argv[1], and whether it
is a ZeroTensor (as plain torch leaves it in .grad)."""

import sys

import torch
import torch.nn.functional as F

grads = {}
x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
(torch.sgn(x) * x).sum().backward()
grads["sgn"] = x.grad.clone()  # a ZeroTensor is not serializable
grads["sgn is a ZeroTensor"] = torch.tensor(x.grad._is_zerotensor())
for name, f in [("abs", torch.abs), ("normalize", lambda t: F.normalize(t, dim=0)),
                ("l1_loss", lambda t: F.l1_loss(t, torch.zeros(3)))]:
    x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)  # fresh: torch cannot add to a ZeroTensor .grad
    (g,) = torch.autograd.grad(f(x).sum(), x, create_graph=True)
    g.sum().backward()
    grads[name] = x.grad.clone()
    grads[f"{name} is a ZeroTensor"] = torch.tensor(x.grad._is_zerotensor())
if len(sys.argv) > 1:
    torch.save(grads, sys.argv[1])
