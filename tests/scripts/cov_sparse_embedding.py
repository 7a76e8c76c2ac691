"""nn.Embedding(sparse=True): the weight's gradient is a sparse COO tensor."""

import sys

import torch

torch.manual_seed(0)
emb = torch.nn.Embedding(10, 3, sparse=True)
head = torch.nn.Linear(3, 1)
tokens = torch.tensor([[1, 4, 4], [7, 1, 0]])
loss = head(emb(tokens)).pow(2).mean()
loss.backward()
assert emb.weight.grad.is_sparse
torch.save({"emb.weight": emb.weight.grad, "head.weight": head.weight.grad, "head.bias": head.bias.grad},
           sys.argv[1])
