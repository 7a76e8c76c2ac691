"""A 12-step loop with exact numbers (weights 1/2, inputs small integers: nothing rounds), for
the replay passes view's snapshot: loss and gradient norms grow step by step, and pass 8's
backward makes a non-finite gradient (sqrt at 0 in the forward, as nan_at_30.py). Prints nothing."""

import torch
from torch import nn

model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
with torch.no_grad():
    for p in model.parameters():
        p.fill_(0.5)
for step in range(12):
    x = torch.full((4, 2), float(step % 5 + 1))
    h = model[1](model[0](x))
    if step == 8:
        h = torch.sqrt(h * 0)
    loss = model[2](h).pow(2).mean()
    model.zero_grad()
    loss.backward()
