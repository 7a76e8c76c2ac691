"""Gradient flow with every kind of row: a saturated (vanishing) layer, an exploding one, a NaN."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
gate = nn.Parameter(torch.zeros(1))
with torch.no_grad():
    model[0].weight.mul_(1e3)  # tanh saturates: almost no gradient reaches the first layer
    model[4].weight.mul_(1e-4)  # a tiny last layer: its gradient dwarfs its weight
inputs = torch.randn(16, 4)
loss = model(inputs).pow(2).mean() + 0.0 * torch.sqrt(gate).sum()  # sqrt'(0) = inf, inf * 0 = nan
loss.backward()
print(f"gate.grad = {gate.grad.item()}")
