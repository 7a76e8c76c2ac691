"""z = x + y; o = w.matmul(z); o.backward(). With `hook` as argv[2], z's gradient is doubled by
the script's own `z.register_hook` (what `break AddBackward0` + `scale 2` should match).
Saves leaf grads to argv[1]."""

import sys

import torch

torch.manual_seed(0)
x = torch.randn(4, requires_grad=True)
y = torch.randn(4, requires_grad=True)
w = torch.randn(4, requires_grad=True)
z = x + y
if sys.argv[2:] == ["hook"]:
    z.register_hook(lambda g: 2 * g)
o = w.matmul(z)
o.backward()
torch.save({"x": x.grad, "y": y.grad, "w": w.grad}, sys.argv[1])
