"""Complex tensors: complex leaves, a complex intermediate, a real loss."""

import sys

import torch

torch.manual_seed(0)
z = torch.randn(3, dtype=torch.complex64, requires_grad=True)
r = torch.randn(3, requires_grad=True)
c = z * torch.polar(torch.ones(3), r)
loss = (c.abs() ** 2).sum() + torch.view_as_real(c * c.conj()).sum()
loss.backward()
torch.save({"z": z.grad, "r": r.grad}, sys.argv[1])
