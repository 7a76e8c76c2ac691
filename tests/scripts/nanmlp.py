"""A seeded MLP trained for 8 steps whose loss turns NaN at pass 5 (a log of a negative number
in the forward); the non-finite gradients are zeroed before the step, so the weights stay
finite and only pass 5 is non-finite. Prints each step's loss."""

import sys

import torch
from torch import nn

torch.manual_seed(0)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 8
model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(steps):
    x = torch.randn(8, 4)
    y = x.sum(dim=1, keepdim=True)
    h = model[:4](x)
    if step == 5:
        h = h + torch.log(h.detach().abs().neg() - 1)  # log of a negative number: NaN
    loss = nn.functional.mse_loss(model[4](h), y)
    opt.zero_grad()
    loss.backward()
    print("step", step, "loss", loss.item(), flush=True)
    with torch.no_grad():
        for p in model.parameters():
            p.grad.nan_to_num_(0.0, 0.0, 0.0)
    opt.step()
