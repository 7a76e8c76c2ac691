"""chain.py's z = (x * 3) ** 2, saying `ready` on stdout just before its backward (which pauses)."""

import torch

x = torch.tensor([2.0], requires_grad=True)
z = (x * 3) ** 2
print("ready", flush=True)
z.backward()
print(f"x.grad = {x.grad.item()}")
