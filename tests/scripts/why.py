"""Variables of every kind `why` tells apart, then one backward."""

import torch

x = torch.tensor([1.0, 2.0], requires_grad=True)  # a leaf on the graph
unused = torch.tensor([3.0], requires_grad=True)  # a leaf the loss does not use
frozen = torch.tensor([4.0])  # requires_grad False
detached = (x * 5).detach()  # cut from the graph
h = x * 2  # a non-leaf on the graph
other = x * 7  # a non-leaf the loss does not use
count = 3
loss = (h * h).sum() + (detached * x).sum()
loss.backward()
