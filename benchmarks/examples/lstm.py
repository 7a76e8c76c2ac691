"""An LSTM over a short sequence; we want the gradient of each step's output.

Without gradtui you would call `out.retain_grad()` on each `outputs[t]`; gradtui shows them as
the labels `outputs[0]`, `outputs[1]`, ... on the graph.
"""

import torch
from torch import nn

torch.manual_seed(0)

cell = nn.LSTMCell(3, 5)
head = nn.Linear(5, 1)
sequence = torch.randn(4, 2, 3)

for epoch in range(2):
    h = torch.zeros(2, 5)
    c = torch.zeros(2, 5)
    outputs = []
    for t in range(sequence.shape[0]):
        h, c = cell(sequence[t], (h, c))
        outputs.append(h)
    loss = head(outputs[-1]).pow(2).mean()
    loss.backward()
    cell.zero_grad()
    head.zero_grad()
    print(f"epoch {epoch} loss {loss.item():.4f}")
