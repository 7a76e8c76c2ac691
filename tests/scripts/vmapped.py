"""Gradients under vmap: torch.func.grad inside vmap, a vectorized jacobian, batched grad_outputs.
Each makes torch call torch.autograd.grad with batched tensors; gradtui must leave them alone."""

import torch
from torch.func import grad, vmap


def cube_sum(v):
    return (v ** 3).sum()


print("vmap grad", vmap(grad(cube_sum))(torch.ones(2, 3)).tolist())
print("jacobian", torch.autograd.functional.jacobian(lambda v: v ** 2, torch.tensor([1.0, 2.0]),
                                                      vectorize=True).tolist())
x = torch.tensor([1.0, 2.0], requires_grad=True)
(batched,) = torch.autograd.grad(x ** 2, x, torch.eye(2), is_grads_batched=True)
print("is_grads_batched", batched.tolist())
loss = (x ** 2).sum()
loss.backward()
print("x.grad", x.grad.tolist())
