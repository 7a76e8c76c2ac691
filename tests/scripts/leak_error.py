"""A backward that fails (the script's own hook raises) inside try/except, as retry loops do:
after the except block, nothing may keep the graph alive (checked without gc.collect(), since
plain torch frees it by reference counting alone)."""

import gc
import weakref

import torch

import stash

stash.items["alive"] = alive = []
x = torch.randn(64, requires_grad=True)


class Sentinel:
    """Something weakly referenceable to hang on an autograd node."""


def bad_hook(grad):
    raise RuntimeError("out of memory (pretend)")


def failing_pass() -> list:
    h = x.exp()
    h.register_hook(bad_hook)
    loss = (h * h).sum()
    sentinel = loss.grad_fn.metadata["test.sentinel"] = Sentinel()
    refs = [weakref.ref(h), weakref.ref(sentinel)]
    del sentinel
    try:
        loss.backward()
    except RuntimeError as exc:
        print("caught", exc)
    return refs


refs = failing_pass()
alive.append(any(ref() is not None for ref in refs))
gc.collect()
alive.append(any(ref() is not None for ref in refs))
