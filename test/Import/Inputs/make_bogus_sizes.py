#!/usr/bin/env python3
"""Writes a copy of a .pt2 archive whose entries declare sizes that their
contents cannot be, for the reader's size bounds (Pt2Zip.cpp,
Pt2StoredTensors.cpp).

usage: make_bogus_sizes.py MODE IN.pt2 OUT.pt2

MODE is one of:
  stored-declares-4g    models/model.json stored, its headers declaring
                        4,000,000,000 bytes (the file is tens of KB)
  deflated-declares-4g  the same, deflated (more than 1032:1)
  json-bomb             models/model.json deflated, padded with 20 MB of
                        spaces (still valid JSON, about 1000:1)
  blob-bomb             the first weight blob deflated with 64 MiB of zeros
                        after the bytes its tensor views
  blob-short            the first weight blob cut to half its size
  blob-slack-stored     the first weight blob stored with 4 KiB more than its
                        tensor views (torch saves a view's whole storage)
  all-deflated          every entry deflated, sizes true
"""
import struct
import sys
import zipfile


def patch_declared_size(data, name, size):
    """Sets entry `name`'s uncompressed size in its local and central
    headers."""
    encoded = name.encode()
    with zipfile.ZipFile(_BytesIO(data)) as archive:
        offset = archive.getinfo(name).header_offset
    data = bytearray(data)
    assert data[offset:offset + 4] == b"PK\x03\x04"
    struct.pack_into("<I", data, offset + 22, size)
    position = data.rfind(b"PK\x05\x06")
    central = struct.unpack_from("<I", data, position + 16)[0]
    while data[central:central + 4] == b"PK\x01\x02":
        name_length, extra_length, comment_length = struct.unpack_from(
            "<HHH", data, central + 28)
        if bytes(data[central + 46:central + 46 + name_length]) == encoded:
            struct.pack_into("<I", data, central + 24, size)
            return bytes(data)
        central += 46 + name_length + extra_length + comment_length
    raise SystemExit(f"{name} not in the central directory")


def _BytesIO(data):
    import io
    return io.BytesIO(data)


def main():
    mode, source, target = sys.argv[1:4]
    with zipfile.ZipFile(source) as archive:
        entries = [(info.filename, archive.read(info))
                   for info in archive.infolist()]
    root = entries[0][0].split("/")[0]
    model_name = f"{root}/models/model.json"
    blob_name = f"{root}/data/weights/weight_0"
    deflated = set()
    contents = dict(entries)
    if mode in ("stored-declares-4g", "all-deflated"):
        pass
    elif mode == "deflated-declares-4g":
        deflated.add(model_name)
    elif mode == "json-bomb":
        contents[model_name] = contents[model_name] + b" " * (20 << 20)
        deflated.add(model_name)
    elif mode == "blob-bomb":
        contents[blob_name] = contents[blob_name] + bytes(64 << 20)
        deflated.add(blob_name)
    elif mode == "blob-short":
        contents[blob_name] = contents[blob_name][:len(contents[blob_name]) // 2]
    elif mode == "blob-slack-stored":
        contents[blob_name] = contents[blob_name] + bytes(4096)
    else:
        raise SystemExit(f"unknown mode {mode}")
    if mode == "all-deflated":
        deflated = set(contents)

    buffer = _BytesIO(b"")
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, _ in entries:
            archive.writestr(
                name, contents[name],
                compress_type=zipfile.ZIP_DEFLATED
                if name in deflated else zipfile.ZIP_STORED)
    data = buffer.getvalue()
    if mode.endswith("declares-4g"):
        data = patch_declared_size(data, model_name, 4_000_000_000)
    with open(target, "wb") as out:
        out.write(data)


if __name__ == "__main__":
    main()
