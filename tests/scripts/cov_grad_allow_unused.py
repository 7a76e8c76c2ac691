"""torch.autograd.grad with allow_unused=True: an input the outputs do not use gets None."""

import sys

import torch

torch.manual_seed(0)
x = torch.randn(3, requires_grad=True)
w = torch.randn(3, requires_grad=True)
unused = torch.randn(3, requires_grad=True)
out = (x * w).cos().sum()
gx, gw, gu = torch.autograd.grad(out, [x, w, unused], allow_unused=True)
assert gu is None
assert x.grad is None and w.grad is None
torch.save({"x": gx, "w": gw}, sys.argv[1])
