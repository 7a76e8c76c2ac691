"""A tiny GAN: two top-level nn.Sequential models, `netG` and `netD`, whose paths and parameter
names (`0`, `2.weight`) would collide without their root's name (issue 11.10)."""

import torch
from torch import nn

torch.manual_seed(0)
layer = nn.Linear(2, 2)  # a module in scope that never runs: it must not count as a root
netG = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 2))
netD = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 1))
criterion = nn.BCEWithLogitsLoss()
for step in range(2):
    fake = netG(torch.randn(8, 2))
    d_loss = criterion(netD(fake.detach()), torch.zeros(8, 1))  # the D step: netD only
    d_loss.backward()
    g_loss = criterion(netD(fake), torch.ones(8, 1))  # the G step: through both
    g_loss.backward()
