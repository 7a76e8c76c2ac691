"""A seeded training loop: argv[1] iterations of an MLP; prints the final loss and saves the
final parameters' gradients to argv[2] when given. argv[3] == "nan" poisons the input of
iteration 7, so its loss is NaN."""

import sys

import torch
from torch import nn

torch.manual_seed(0)
iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 10
model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(32, 4), torch.randn(32, 1)
for step in range(iterations):
    batch = x.clone()
    if sys.argv[3:] == ["nan"] and step == 7:
        batch[0, 0] = float("nan")
    loss = ((model(batch) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    if step < iterations - 1:
        opt.step()
print(f"final loss {loss.item():.6f}")
if len(sys.argv) > 2:
    torch.save({name: p.grad for name, p in model.named_parameters()}, sys.argv[2])
