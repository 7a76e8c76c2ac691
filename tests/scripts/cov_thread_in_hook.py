"""A backward from a thread of the script while the main thread's pass is in flight: the
script's tensor hook starts a worker thread that runs its own backward, and joins it (with a
timeout) before the outer pass goes on."""

import sys
import threading

import torch

torch.manual_seed(0)
x = torch.randn(3, requires_grad=True)
w = torch.randn(3, requires_grad=True)
v = torch.randn(3, requires_grad=True)
h = x * w
worker_grads = {}


def side_job():
    loss = (v * 3).sin().sum()
    loss.backward()
    worker_grads["v"] = v.grad.clone()


def hook(g):
    worker = threading.Thread(target=side_job, name="user-worker")
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "the worker's backward never finished"
    return g


h.register_hook(hook)
loss = torch.exp(h).sum()
loss.backward()
torch.save({"x": x.grad, "w": w.grad, "v": worker_grads["v"]}, sys.argv[1])
