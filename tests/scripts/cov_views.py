"""Views: view, transpose, narrow, expand, unbind, diagonal, as_strided."""

import sys

import torch

torch.manual_seed(0)
x = torch.randn(2, 6, requires_grad=True)
w = torch.randn(3, requires_grad=True)
v = x.view(4, 3).t()
n = v.narrow(1, 1, 2)
e = w.unsqueeze(1).expand(3, 2)
rows = (n * e).unbind(0)
d = torch.diagonal(x.view(3, 4)[:, :3])
s = x.as_strided((2, 2), (1, 2))
loss = sum(r.sum() * (i + 1) for i, r in enumerate(rows)) + d.sum() + s.prod()
loss.backward()
torch.save({"x": x.grad, "w": w.grad}, sys.argv[1])
