"""An nn.Sequential, so its parameters are named `0.weight`, `2.bias`, ..."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
loss = model(torch.randn(4, 2)).sum()
loss.backward()
