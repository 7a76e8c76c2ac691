"""A seeded MLP with labelled hidden activations: `h` (4x8, 32 values) and `h2` (4x32, 128 values).

argv[1]: where to torch.save the leaf grads; with `retain` as argv[2], also h.grad and h2.grad.
"""

import sys

import torch
from torch import nn

torch.manual_seed(0)
fc1, fc2, fc3 = nn.Linear(3, 8), nn.Linear(8, 32), nn.Linear(32, 1)
x = torch.randn(4, 3, requires_grad=True)
retain = sys.argv[2:] == ["retain"]

h = torch.tanh(fc1(x))
h2 = torch.relu(fc2(h))
loss = fc3(h2).pow(2).mean()
if retain:
    h.retain_grad()
    h2.retain_grad()
loss.backward()

grads = {"x": x.grad}
for module_name, module in (("fc1", fc1), ("fc2", fc2), ("fc3", fc3)):
    for name, param in module.named_parameters():
        grads[f"{module_name}.{name}"] = param.grad
if retain:
    grads["h"], grads["h2"] = h.grad, h2.grad
torch.save(grads, sys.argv[1])
