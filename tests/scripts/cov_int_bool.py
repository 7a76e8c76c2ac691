"""Integer and bool inputs that take no gradient: indices, a mask, an integer scale."""

import sys

import torch

torch.manual_seed(0)
x = torch.randn(5, 3, requires_grad=True)
index = torch.tensor([4, 0, 2, 2])
mask = torch.tensor([True, False, True])
count = torch.tensor([1, 2, 3], dtype=torch.int64)
picked = x[index]
masked = torch.where(mask, picked, torch.zeros(()))
gathered = torch.gather(masked, 1, torch.tensor([[0], [2], [1], [0]]))
loss = (masked * count).sum() + gathered.pow(2).sum() + x[mask.nonzero().squeeze(1)].sum()
loss.backward()
torch.save({"x": x.grad}, sys.argv[1])
