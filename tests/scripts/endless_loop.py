"""A small training loop that runs until it is killed (at most 100,000 steps), printing each step."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.001)
for step in range(100_000):
    loss = model(torch.randn(32, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("step", step, flush=True)
