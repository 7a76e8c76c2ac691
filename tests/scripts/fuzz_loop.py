"""The same small pass again and again, until stash.items["stop"]: a ZeroTensor (sgn), a
gradient AddBackward0 sends to both inputs, a leaf used twice. Each pass's leaf gradients go to
stash.items["grads"] as (pass number, x.grad, w.grad). The formula is stash.items["forward"],
so the test computes the plain gradients with the very same code."""

import torch

import stash

forward = stash.items["forward"]
i = 0
while not stash.items.get("stop"):
    x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    w = torch.tensor([0.5, 0.25, -1.0], requires_grad=True)
    y, loss = forward(x, w)
    loss.backward()
    stash.items["grads"].append((i, x.grad.clone(), w.grad.clone()))
    i += 1
