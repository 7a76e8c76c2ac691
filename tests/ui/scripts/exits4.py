"""One pass, a line of output, then os._exit(4): the agent process ends without a word."""

import os

import torch

x = torch.ones(2, requires_grad=True)
(x * 2).sum().backward()
print("leaving now", flush=True)
os._exit(4)
