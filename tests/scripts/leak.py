"""Each pass makes a big intermediate `h` (saved by `h * h`) inside a function and weakly refers
to it from `stash`; after the pass, the script records whether `h` is still alive."""

import gc
import sys
import weakref

import torch

import stash

passes = int(sys.argv[1]) if len(sys.argv) > 1 else 2
stash.items["refs"] = refs = []
stash.items["alive"] = alive = []
x = torch.randn(256, 256, requires_grad=True)


def one_pass() -> None:
    h = x.exp()
    loss = (h * h).sum()
    refs.append(weakref.ref(h))
    loss.backward()


for i in range(passes):
    one_pass()
    alive.append(refs[-1]() is not None)  # without gc: no reference cycle keeps it either
    gc.collect()
    alive.append(refs[-1]() is not None)
