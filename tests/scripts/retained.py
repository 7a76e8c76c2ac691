"""Keeps its graph alive (retain_graph=True) in the `stash` module so a test can run backward
again after gradtui is gone and check that no hook of gradtui's is left on it."""

import torch

import stash

x = torch.tensor([2.0], requires_grad=True)
z = (x * 3) ** 2
stash.items["x"] = x
stash.items["z"] = z
z.backward(retain_graph=True)
print("after backward")
