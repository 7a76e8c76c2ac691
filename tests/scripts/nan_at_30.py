"""A training loop whose gradient turns non-finite at pass 30 (sqrt at 0 in the forward); it
prints each parameter's gradient norm per step as torch computes it (`torch._foreach_norm`)."""

import sys

import torch
from torch import nn

torch.manual_seed(0)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(steps):
    x = torch.randn(16, 4)
    h = model[1](model[0](x))
    if step == 30:
        h = torch.sqrt(h * 0)  # forward is fine (zeros); backward: 0.5 / sqrt(0) = inf
    loss = model[2](h).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    norms = [float(n) for n in torch._foreach_norm([p.grad for p in model.parameters()])]
    print("step", step, "norms", " ".join(repr(n) for n in norms), flush=True)
    with torch.no_grad():
        for p in model.parameters():
            p.grad.nan_to_num_(0.0, 0.0, 0.0)
    opt.step()
