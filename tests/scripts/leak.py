"""Each pass makes a big intermediate `h` (saved by `h * h`) inside a function. Weak references
to `h` and to sentinels stored in the metadata of the loss's node and of h's node (which live
exactly as long as those autograd nodes) go to `stash`; after each pass the script records
whether any of them is still alive, before and after gc.collect()."""

import gc
import sys
import weakref

import torch

import stash

passes = int(sys.argv[1]) if len(sys.argv) > 1 else 2
stash.items["refs"] = refs = []
stash.items["alive"] = alive = []
x = torch.randn(256, 256, requires_grad=True)


class Sentinel:
    """Something weakly referenceable to hang on an autograd node."""


def one_pass() -> None:
    h = x.exp()
    loss = (h * h).sum()
    pass_refs = [weakref.ref(h)]
    for node in (loss.grad_fn, h.grad_fn):
        sentinel = node.metadata["test.sentinel"] = Sentinel()
        pass_refs.append(weakref.ref(sentinel))
    refs.append(pass_refs)
    loss.backward()


def any_alive(pass_refs) -> bool:
    return any(ref() is not None for ref in pass_refs)


for i in range(passes):
    one_pass()
    alive.append(any_alive(refs[-1]))  # without gc: no reference cycle keeps them either
    gc.collect()
    alive.append(any_alive(refs[-1]))
