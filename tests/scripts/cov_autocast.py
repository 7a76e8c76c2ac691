"""Mixed precision: torch.autocast on CPU with bfloat16."""

import sys

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
inputs = torch.randn(3, 4)
with torch.autocast("cpu", dtype=torch.bfloat16):
    out = model(inputs)
assert out.dtype == torch.bfloat16
loss = out.float().pow(2).mean()
loss.backward()
torch.save({name: p.grad for name, p in model.named_parameters()}, sys.argv[1])
