"""Mantissa's Python side.

`mantissa.export` turns a PyTorch model and one batch into the files that
mantissa-compile and mantissa-run read (the joint forward + backward program
as a torch.export `.pt2`, the initial weights, the batch) and, on request,
torch's own loss, gradients and AdamW trajectory to check them against.
`mantissa.zoo` holds model factories for it.
"""

__version__ = "0.1.0"
