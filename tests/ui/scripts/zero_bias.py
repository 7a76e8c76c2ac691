"""Two passes of a small seeded MLP whose biases start at zero (as GPT-2's and BERT's do)."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
with torch.no_grad():
    model[0].bias.zero_()
    model[2].bias.zero_()
inputs = torch.randn(16, 4)
for step in range(2):
    loss = model(inputs).pow(2).mean()
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
