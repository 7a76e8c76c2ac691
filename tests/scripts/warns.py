"""Torch warnings from the user's own lines: twice the same warning from two lines, one line
warning in a loop (shown once), and torch.compile of a module (issue 11.13)."""

import torch

torch.manual_seed(0)
t = torch.arange(6.0).reshape(2, 3).requires_grad_()
a = t[[[0, 1]]]
b = t[[[1, 0]]]
for _ in range(3):
    c = t[[[0, 0]]]
model = torch.nn.Linear(3, 3)
compiled = torch.compile(model, backend="eager")
(a.sum() + b.sum() + c.sum() + compiled(t).sum()).backward()
print("grad", t.grad.tolist())
