"""A torch.compile'd model (aot_eager: no C compiler needed) trained for two steps."""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
compiled = torch.compile(model, backend="aot_eager")
inputs = torch.randn(5, 4)
for step in range(2):
    loss = compiled(inputs).pow(2).mean()
    loss.backward()
print("grad", round(model[0].weight.grad.sum().item(), 5))
