"""A seeded Conv2d + BatchNorm2d + ReLU + Linear net (training mode); saves leaf grads to argv[1]."""

import sys

import torch
from torch import nn

torch.manual_seed(0)
net = nn.Sequential(
    nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
    nn.Flatten(), nn.Linear(4 * 5 * 5, 3),
)
x = torch.randn(3, 2, 5, 5, requires_grad=True)
loss = nn.functional.cross_entropy(net(x), torch.tensor([0, 2, 1]))
loss.backward()
torch.save({"x": x.grad, **{n: p.grad for n, p in net.named_parameters()}}, sys.argv[1])
