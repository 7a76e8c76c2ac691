"""One backward, then a loop that never calls backward again: quitting must still end it."""

import time

import torch

x = torch.ones(1, requires_grad=True)
(x * 2).sum().backward()
print("looping", flush=True)
while True:
    time.sleep(0.05)
