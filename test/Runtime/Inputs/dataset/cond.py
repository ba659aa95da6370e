# The model of test/Runtime/dataset*.test. cond.pt2, cond.init.safetensors and
# cond.inputs.safetensors are what the exporter wrote (torch 2.11):
#   PYTHONPATH=python .venv/bin/python3 -m mantissa.export test/Runtime/Inputs/dataset/cond.py:cond OUT cond
import torch, torch.nn as nn, torch.nn.functional as F

class CondMLP(nn.Module):
    """A class-conditional regressor: float features, an int64 class label that
    indexes an embedding, a float target and a bool mask of the target's entries."""
    def __init__(self):
        super().__init__()
        self.label_emb = nn.Embedding(5, 8)
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x, label, y, mask):
        h = F.gelu(self.fc1(x + self.label_emb(label)))
        err = (self.fc2(h) - y) ** 2
        return torch.where(mask, err, torch.zeros_like(err)).mean()

def cond():
    torch.manual_seed(0)
    model = CondMLP()
    batch = (torch.randn(2, 8), torch.randint(0, 5, (2,)), torch.randn(2, 4), torch.rand(2, 4) > 0.3)
    return model, batch
