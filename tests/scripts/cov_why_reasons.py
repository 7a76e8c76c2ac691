"""One variable for each answer `why` gives, then one backward."""

import torch

x = torch.tensor([1.0, 2.0], requires_grad=True)  # a leaf on the graph
frozen = torch.tensor([4.0])  # requires_grad False
detached = (x * 5).detach()  # cut from the graph by .detach()
with torch.no_grad():
    under_no_grad = x * 6  # made under no_grad
h = x * 2  # a non-leaf on the graph, without retain_grad()
kept = x * 3  # a non-leaf on the graph, with retain_grad()
kept.retain_grad()
unused_leaf = torch.tensor([3.0], requires_grad=True)  # a leaf the loss does not use
beside = x * 7  # a non-leaf the loss does not use
loss = (h * h).sum() + (kept * detached).sum() + (under_no_grad * x).sum() + frozen.sum()
loss.backward()
print("kept.grad", kept.grad.tolist())
