"""backward(inputs=[...]): only the listed leaves get a gradient."""

import sys

import torch

torch.manual_seed(0)
x = torch.randn(2, 3, requires_grad=True)
w = torch.randn(3, 2, requires_grad=True)
b = torch.randn(2, requires_grad=True)
loss = torch.relu(x @ w + b).pow(2).sum()
loss.backward(inputs=[w, b])
assert x.grad is None
hidden = torch.tanh(x @ w)  # a non-leaf as the only input: it gets a .grad of its own
(hidden * b).sum().backward(inputs=[hidden])
assert w.grad is not None and x.grad is None
torch.save({"w": w.grad, "b": b.grad, "hidden": hidden.grad}, sys.argv[1])
