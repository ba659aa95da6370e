"""The random numbers of a Mantissa step, bit for bit, in plain Python.

The reference for docs/randomness.md: the same values the runtime computes
(include/mantissa/Format/RandomDraw.h, lib/Format/RandomDraw.cpp) for a
random step argument, from the run's --seed, the torch node's name, the
global sample index (or the step) and the element's index. Standard library
only (math and struct on the platform's libm, as the C++ uses it).

    python3 -m mantissa.random_reference --golden   # the values test/Inputs/random-golden.json holds
"""

from __future__ import annotations

import argparse
import json
import math
import struct

MASK32 = 0xFFFFFFFF


def philox4x32_10(counter, key):
    """Philox4x32 with 10 rounds of (counter[4], key[2]) -> 4 words."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(10):
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & MASK32, p1 & MASK32, \
            ((p0 >> 32) ^ c3 ^ k1) & MASK32, p0 & MASK32
        k0 = (k0 + 0x9E3779B9) & MASK32
        k1 = (k1 + 0xBB67AE85) & MASK32
    return c0, c1, c2, c3


def stream(node: str) -> int:
    """FNV-1a (32-bit) of the node's name (UTF-8)."""
    value = 2166136261
    for byte in node.encode():
        value = ((value ^ byte) * 16777619) & MASK32
    return value


SIGNIFICAND_BITS = {"F64": 53, "F32": 24, "F16": 11, "BF16": 8}


def words(node_stream: int, seed: int, index: int, element: int):
    return philox4x32_10((element & MASK32, node_stream, index & MASK32, index >> 32),
                         (seed & MASK32, seed >> 32))


def value(distribution: str, low: float, high: float, dtype: str, w) -> float | int:
    """The exact value (a double, or an int for integer draws) before the
    rounding to dtype."""
    wide = (w[1] << 32) | w[0]
    if distribution == "uniform":
        bits = SIGNIFICAND_BITS[dtype]
        u = math.ldexp(wide >> 11, -53) if bits == 53 else math.ldexp(w[0] >> (32 - bits), -bits)
        return low + (high - low) * u
    if distribution == "normal":
        u1 = math.ldexp(w[0] + 1.0, -32)
        u2 = math.ldexp(float(w[1]), -32)
        z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
        return low + high * z
    if distribution == "integer":
        lo, hi = int(low), int(high)
        return lo + wide % (hi - lo)
    if distribution == "bernoulli":
        return 1.0 if math.ldexp(float(w[0]), -32) < low else 0.0
    raise ValueError(f"unknown distribution {distribution!r}")


def _float_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def stored_bits(distribution: str, v, dtype: str) -> int:
    """The element's stored bits in dtype (round to nearest even, through
    float32 for bf16 and fp16, as the runtime rounds)."""
    if distribution == "integer" and dtype in ("I64", "I32"):
        return v & ((1 << (64 if dtype == "I64" else 32)) - 1)
    if dtype == "F64":
        return struct.unpack("<Q", struct.pack("<d", float(v)))[0]
    if dtype == "F32":
        return _float_bits(float(v))
    if dtype == "BF16":
        bits = _float_bits(float(v))
        if (bits & 0x7FFFFFFF) > 0x7F800000:
            return 0x7FC0
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    if dtype == "F16":
        f32 = struct.unpack("<f", struct.pack("<f", float(v)))[0]
        return struct.unpack("<H", struct.pack("<e", f32))[0]
    if dtype in ("I64", "I32"):
        return int(v) & ((1 << (64 if dtype == "I64" else 32)) - 1)
    if dtype == "Bool":
        return 1 if v != 0 else 0
    raise ValueError(f"unsupported dtype {dtype!r}")


def draw(distribution: str, low: float, high: float, node: str, per_sample: bool,
         dtype: str, shape: list[int], seed: int, first_sample: int, step: int) -> list[int]:
    """A whole random argument's stored bits, row-major: what the runtime's
    fillRandomDraw writes."""
    samples = shape[0] if per_sample else 1
    per = 1
    for d in (shape[1:] if per_sample else shape):
        per *= d
    node_stream = stream(node)
    out = []
    for sample in range(samples):
        index = first_sample + sample if per_sample else (1 << 63) + step
        for element in range(per):
            v = value(distribution, low, high, dtype, words(node_stream, seed, index, element))
            out.append(stored_bits(distribution, v, dtype))
    return out


# The cases test/Inputs/random-golden.json holds (RandomDrawTest.cpp reads
# them and compares the C++ generator's bits).
GOLDEN_CASES = [
    ("normal", 0.0, 1.0, "randn_like", True, "F32", [3, 5], 42, 6, 1),
    ("normal", 0.5, 2.0, "normal_functional", False, "BF16", [7], 2**64 - 1, 0, 3),
    ("normal", 0.0, 1.0, "randn", True, "F64", [2, 3], 7, 0, 1),
    ("uniform", 0.0, 1.0, "rand", True, "F32", [2, 4], 1, 10, 1),
    ("uniform", -2.0, 3.0, "uniform", False, "F16", [6], 123456789, 0, 9),
    ("uniform", 0.0, 1.0, "rand_like", True, "F64", [2, 2], 5, 3, 1),
    ("integer", 0.0, 1000.0, "randint", True, "I64", [4], 99, 100, 1),
    ("integer", -5.0, 5.0, "randint_like", False, "I32", [8], 3, 0, 2),
    ("bernoulli", 0.9, 0.0, "native_dropout", True, "Bool", [2, 8], 11, 2, 1),
]


def golden() -> list[dict]:
    cases = []
    for (distribution, low, high, node, per_sample, dtype, shape, seed, first, step) in GOLDEN_CASES:
        cases.append({"distribution": distribution, "low": low, "high": high, "node": node,
                      "per_sample": per_sample, "dtype": dtype, "shape": shape,
                      "seed": str(seed), "first_sample": first, "step": step,
                      "bits": [str(b) for b in draw(distribution, low, high, node, per_sample,
                                                    dtype, shape, seed, first, step)]})
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--golden", action="store_true",
                        help="print the golden cases as JSON (test/Inputs/random-golden.json)")
    args = parser.parse_args()
    if args.golden:
        print(json.dumps({"cases": golden()}, indent=1))


if __name__ == "__main__":
    main()
