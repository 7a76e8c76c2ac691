"""A tensor hook raises KeyboardInterrupt during backward: python prints it and dies of SIGINT."""
import torch

x = torch.ones(3, requires_grad=True)
y = x * 2
print("ready", flush=True)


def hook(grad):
    raise KeyboardInterrupt


y.register_hook(hook)
y.sum().backward()
print("not reached")
