"""Writes an llm.c token shard (uint16 tokens) holding the given ids.

Usage: make_tokens.py OUT.bin REPEAT ID,ID,...  (the ids, repeated REPEAT
times, so that the stream holds enough samples).
"""
import struct
import sys

out, repeat, ids = sys.argv[1], int(sys.argv[2]), [int(t) for t in sys.argv[3].split(",")]
tokens = ids * repeat
header = [20240520, 1, len(tokens)] + [0] * 253
with open(out, "wb") as f:
    f.write(struct.pack("<256i", *header))
    f.write(struct.pack("<%dH" % len(tokens), *tokens))
