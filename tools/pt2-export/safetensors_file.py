"""safetensors written by hand (an 8-byte little-endian header length, the
JSON header, the data), for the exporters here: Debian's torch 1.13 has no
safetensors package, nor need the device machine's venv. One definition for
export_joint.py (and the scripts that use it) and export_sdpa_models.py;
test/Inputs/compare_safetensors.py reads the format back."""
import json
import struct

import torch

SAFETENSORS_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64",
                      torch.int32: "I32", torch.bfloat16: "BF16", torch.float16: "F16",
                      torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8"}


def tensor_bytes(tensor):
    """A tensor's elements, little-endian, in row-major order."""
    tensor = tensor.detach().contiguous().cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().astype("<i2").tobytes()
    return tensor.numpy().astype(tensor.numpy().dtype.newbyteorder("<")).tobytes()


def save_safetensors(tensors, path):
    """Writes `tensors` ({name: tensor}, in that order) to `path`."""
    header, chunks, offset = {}, [], 0
    for name, tensor in tensors.items():
        data = tensor_bytes(tensor)
        header[name] = {"dtype": SAFETENSORS_DTYPES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for chunk in chunks:
            out.write(chunk)
