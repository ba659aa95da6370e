#!/usr/bin/env python3
"""Small safetensors helper for the runtime tests (no torch needed).

  st.py pick SRC OUT NEW=OLD ...      write OUT with SRC's tensor OLD as NEW
  st.py equal A KEY_A B KEY_B         bitwise equality of two tensors
  st.py same A B                      same tensor names and bits in both files
  st.py ckpt-drop CKPT STATE          drop STATE/* tensors from every rank file
                                      (and fix the index sizes)
  st.py ckpt-cast CKPT STATE DTYPE    store STATE/* tensors as BF16
  st.py ckpt-shrink CKPT STATE        drop the last element of STATE/*
                                      tensors (a wrong shape)
  st.py manifest-plan ART FQN AXIS DT set the plan's AXIS (master, gather,
                                      reduce, moments) of FQN in ART's
                                      manifest, leaving the layout alone
  st.py manifest-member ART FQN KEY V set a group member's KEY (e.g. master)
  st.py close A B RTOL                same names, fp32 values within
                                      RTOL * |b| + 1e-7 of each other
  st.py set-int SRC OUT NAME I V      copy SRC to OUT with element I of the
                                      I64/I32 tensor NAME set to V
  st.py set-float SRC OUT NAME I V    copy SRC to OUT with element I of the
                                      F32/BF16 tensor NAME set to V (nan, inf)
  st.py ckpt-set-float CKPT NAME I V  set element I of tensor NAME in CKPT's
                                      rank-0 file to V, checksums and index
                                      sizes refreshed (a state that is valid
                                      but not finite)
  st.py manifest-refresh ART FILE     record FILE's new size and checksum in
                                      ART's manifest (after editing FILE)
  st.py ties SRC OUT NAME             copy SRC to OUT with every other element
                                      of the F32 tensor NAME moved to an exact
                                      bf16 tie whose truncation is even (low 17
                                      bits 0x08000), the rest left as they are
  st.py zeros SRC OUT NAME            copy SRC to OUT with tensor NAME zeroed
  st.py count-ties A NAME             how many elements of the F32 tensor
                                      NAME are such ties
"""
import json, struct, sys, os, glob


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    tensors = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        tensors[name] = (info["dtype"], info["shape"], body[a:b])
    return tensors, meta


def write(path, tensors, meta):
    header, offset, chunks = {}, 0, []
    for name in sorted(tensors):
        dtype, shape, raw = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if meta:
        header["__metadata__"] = meta
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def fix_index(ckpt):
    index_path = os.path.join(ckpt, "index.json")
    index = json.load(open(index_path))
    for entry in index["files"]:
        entry["bytes"] = os.path.getsize(os.path.join(ckpt, entry["file"]))
    json.dump(index, open(index_path, "w"))


def main():
    cmd = sys.argv[1]
    if cmd == "pick":
        src, _ = read(sys.argv[2])
        out = {}
        for pair in sys.argv[4:]:
            new, old = pair.split("=")
            out[new] = src[old]
        write(sys.argv[3], out, {"format": "pt"})
    elif cmd == "manifest-refresh":
        art, name = sys.argv[2], sys.argv[3]
        path = os.path.join(art, "manifest.json")
        manifest = json.load(open(path))
        data = open(os.path.join(art, name), "rb").read()
        manifest["files"][name] = {"bytes": len(data),
                                   "fnv1a64": "%x" % fnv1a64(data)}
        json.dump(manifest, open(path, "w"), indent=2)
    elif cmd == "set-int":
        src, meta = read(sys.argv[2])
        name, index, value = sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
        dtype, shape, raw = src[name]
        code = {"I64": "<q", "I32": "<i"}[dtype]
        raw = bytearray(raw)
        struct.pack_into(code, raw, index * struct.calcsize(code), value)
        src[name] = (dtype, shape, bytes(raw))
        write(sys.argv[3], src, meta)
    elif cmd in ("set-float", "ckpt-set-float"):
        if cmd == "set-float":
            path, out = sys.argv[2], sys.argv[3]
            name, index, value = sys.argv[4], int(sys.argv[5]), float(sys.argv[6])
        else:
            path = out = glob.glob(os.path.join(sys.argv[2], "step-*rank-0*.safetensors"))[0]
            name, index, value = sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
        src, meta = read(path)
        dtype, shape, raw = src[name]
        raw = bytearray(raw)
        if dtype == "F32":
            struct.pack_into("<f", raw, index * 4, value)
        else:
            bits = struct.unpack("<I", struct.pack("<f", value))[0] >> 16
            struct.pack_into("<H", raw, index * 2, bits | (0x40 if value != value else 0))
        src[name] = (dtype, shape, bytes(raw))
        if cmd == "ckpt-set-float" and "checksums" in meta:
            meta["checksums"] = json.dumps(
                {k: "%016x" % fnv1a64(r) for k, (_, _, r) in src.items()})
        write(out, src, meta)
        if cmd == "ckpt-set-float":
            fix_index(sys.argv[2])
    elif cmd == "ties":
        src, meta = read(sys.argv[2])
        dtype, shape, raw = src[sys.argv[4]]
        vals = list(struct.unpack(f"<{len(raw)//4}I", raw))
        for i in range(0, len(vals), 2):
            vals[i] = (vals[i] & ~0x1FFFF) | 0x8000
        src[sys.argv[4]] = (dtype, shape, struct.pack(f"<{len(vals)}I", *vals))
        write(sys.argv[3], src, meta)
    elif cmd == "zeros":
        src, meta = read(sys.argv[2])
        dtype, shape, raw = src[sys.argv[4]]
        src[sys.argv[4]] = (dtype, shape, bytes(len(raw)))
        write(sys.argv[3], src, meta)
    elif cmd == "count-ties":
        src, _ = read(sys.argv[2])
        dtype, shape, raw = src[sys.argv[3]]
        n = sum(1 for (v,) in struct.iter_unpack("<I", raw)
                if v & 0x1FFFF == 0x8000)
        print(f"{n} ties")
    elif cmd == "equal":
        a, _ = read(sys.argv[2])
        b, _ = read(sys.argv[4])
        x, y = a[sys.argv[3]], b[sys.argv[5]]
        if x != y:
            diff = sum(1 for i in range(0, len(x[2]), 4) if x[2][i:i+4] != y[2][i:i+4])
            print(f"DIFFERENT: {sys.argv[3]} vs {sys.argv[5]} ({diff} words differ)")
            sys.exit(1)
        print("EQUAL")
    elif cmd == "same":
        a, _ = read(sys.argv[2])
        b, _ = read(sys.argv[3])
        if a.keys() != b.keys():
            print("DIFFERENT NAMES", sorted(a.keys() ^ b.keys()))
            sys.exit(1)
        bad = [k for k in a if a[k] != b[k]]
        if bad:
            print("DIFFERENT:", ", ".join(sorted(bad)))
            sys.exit(1)
        print(f"SAME ({len(a)} tensors)")
    elif cmd in ("ckpt-drop", "ckpt-cast", "ckpt-shrink"):
        ckpt, state = sys.argv[2], sys.argv[3]
        for path in glob.glob(os.path.join(ckpt, "step-*.safetensors")):
            tensors, meta = read(path)
            ranges = json.loads(meta["ranges"])
            for name in list(tensors):
                if not name.startswith(state + "/"):
                    continue
                if cmd == "ckpt-drop":
                    del tensors[name]
                    del ranges[name]
                elif cmd == "ckpt-shrink":
                    dtype, shape, raw = tensors[name]
                    width = len(raw) // max(1, shape[0])
                    tensors[name] = (dtype, [shape[0] - 1], raw[:len(raw) - width])
                else:
                    dtype, shape, raw = tensors[name]
                    vals = struct.unpack(f"<{len(raw)//4}I", raw)
                    # round to nearest even bf16
                    out = [((v + 0x7FFF + ((v >> 16) & 1)) >> 16) & 0xFFFF for v in vals]
                    tensors[name] = ("BF16", shape, struct.pack(f"<{len(out)}H", *out))
            meta["ranges"] = json.dumps(ranges)
            # A checkpoint written this way carries its own checksums.
            if "checksums" in meta:
                meta["checksums"] = json.dumps(
                    {name: "%016x" % fnv1a64(raw)
                     for name, (_, _, raw) in tensors.items()})
            write(path, tensors, meta)
        fix_index(ckpt)
    elif cmd == "manifest-plan":
        path = os.path.join(sys.argv[2], "manifest.json")
        manifest = json.load(open(path))
        fqn, axis, dtype = sys.argv[3], sys.argv[4], sys.argv[5]
        hits = [t for t in manifest["tensors"] if t["fqn"] == fqn]
        if not hits or axis not in hits[0]:
            sys.exit(f"no plan axis {axis} for {fqn}")
        hits[0][axis] = dtype
        json.dump(manifest, open(path, "w"), indent=2)
    elif cmd == "close":
        a, _ = read(sys.argv[2])
        b, _ = read(sys.argv[3])
        rtol = float(sys.argv[4])
        if a.keys() != b.keys():
            print("DIFFERENT NAMES", sorted(a.keys() ^ b.keys()))
            sys.exit(1)
        worst, far = 0.0, 0
        for k in a:
            if a[k][0] != "F32" or b[k][0] != "F32":
                sys.exit(f"close: {k} is not F32 in both files")
            x = struct.unpack(f"<{len(a[k][2])//4}f", a[k][2])
            y = struct.unpack(f"<{len(b[k][2])//4}f", b[k][2])
            for p, q in zip(x, y):
                worst = max(worst, abs(p - q))
                if not abs(p - q) <= rtol * abs(q) + 1e-7:
                    far += 1
        if far:
            print(f"FAR: {far} values differ by more than {rtol} relative (max abs diff {worst:.3g})")
            sys.exit(1)
        print(f"CLOSE ({len(a)} tensors, max abs diff {worst:.3g})")
    elif cmd == "manifest-member":
        path = os.path.join(sys.argv[2], "manifest.json")
        manifest = json.load(open(path))
        hits = [m for g in manifest["groups"] for m in g["members"]
                if m["fqn"] == sys.argv[3]]
        if not hits or sys.argv[4] not in hits[0]:
            sys.exit(f"no member field {sys.argv[4]} for {sys.argv[3]}")
        hits[0][sys.argv[4]] = sys.argv[5]
        json.dump(manifest, open(path, "w"), indent=2)
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
