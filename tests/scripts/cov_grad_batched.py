"""torch.autograd.grad(is_grads_batched=True): a whole Jacobian in one call, then a plain grad."""

import sys

import torch

torch.manual_seed(0)
x = torch.randn(3, requires_grad=True)
y = x ** 2 * torch.arange(1.0, 4.0)
(jac,) = torch.autograd.grad(y, x, torch.eye(3), retain_graph=True, is_grads_batched=True)
(gx,) = torch.autograd.grad(y.sum(), x)
torch.save({"jacobian": jac, "x": gx}, sys.argv[1])
