#!/usr/bin/env python3
"""Generates a small token dataset for the example llama (vocab 64) in llm.c's shard format.

usage: make_data.py [OUTDIR]      (default: data/ next to this script)

Writes OUTDIR/train.bin (40,000 tokens, seed 1) and OUTDIR/val.bin (4,000 tokens, seed 2).
Shard format (llm.c): a 1024-byte header of 256 little-endian int32 (header[0] = 20240520,
the magic for uint16 tokens, header[1] = 1 the version, header[2] = the token count, the rest
0), then the tokens as little-endian uint16.

The text is a toy language: sentences from a small probabilistic grammar with agreement, so a
tiny model has something to learn (which word class comes next, which noun class a determiner
announces, which verbs go with which subjects). Only random.Random(seed).random() is used, so the
output is the same on every Python 3 and machine.

Vocabulary (64 symbols):
  0 "."  end of sentence         1 ","  joins two clauses
  2-5    conjunctions            6-9    determiners (one per noun class)
  10-17  adjectives (2 per class) 18-41 nouns (4 classes of 6)
  42-57  verbs (4 classes of 4)  58-63  adverbs

Grammar:
  S      -> Clause ["," Conj Clause] "."
  Clause -> NP(c) Verb(c) [NP(obj(v))] [Adverb(v)]    the verb agrees with its subject's class c
  NP(c)  -> Det(c) Adj(c)* Noun(c)                     0-2 adjectives
Each choice follows the class's preferred symbols most of the time and any symbol of its kind
otherwise, with Zipf-like weights inside a set.
"""
import os
import struct
import sys
import random

END, COMMA = 0, 1
CONJ = range(2, 6)
DET, ADJ, NOUN, VERB, ADV = 6, 10, 18, 42, 58


class Grammar:
    def __init__(self, seed):
        self.rng = random.Random(seed)

    def chance(self, p):
        return self.rng.random() < p

    def pick(self, items):
        """One of items, item i with weight 1/(i+1) (Zipf)."""
        items = list(items)
        weights = [1.0 / (i + 1) for i in range(len(items))]
        r = self.rng.random() * sum(weights)
        for item, w in zip(items, weights):
            r -= w
            if r < 0:
                return item
        return items[-1]

    def noun_phrase(self, c):
        out = [DET + c if self.chance(0.8) else self.pick(range(DET, DET + 4))]
        for _ in range(self.pick([0, 1, 2])):
            out.append(self.pick(range(ADJ + 2 * c, ADJ + 2 * c + 2)) if self.chance(0.85)
                       else self.pick(range(ADJ, ADJ + 8)))
        out.append(NOUN + 6 * c + self.pick(range(6)))
        return out

    def clause(self):
        c = self.pick(range(4))
        out = self.noun_phrase(c)
        verb = self.pick(range(4))
        out.append(VERB + 4 * c + verb)
        if self.chance(0.6):  # transitive: the verb chooses its object's class
            out += self.noun_phrase((c + verb + 1) % 4 if self.chance(0.9) else self.pick(range(4)))
        if self.chance(0.4):  # the verb prefers one adverb
            out.append(ADV + (c + verb) % 6 if self.chance(0.8) else self.pick(range(ADV, ADV + 6)))
        return out

    def sentence(self):
        out = self.clause()
        if self.chance(0.3):
            out += [COMMA, self.pick(CONJ)] + self.clause()
        return out + [END]

    def tokens(self, count):
        out = []
        while len(out) < count:
            out += self.sentence()
        return out[:count]


def write_shard(path, tokens):
    assert all(0 <= t < 64 for t in tokens)
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    os.makedirs(out, exist_ok=True)
    for name, seed, count in (("train", 1, 40000), ("val", 2, 4000)):
        tokens = Grammar(seed).tokens(count)
        write_shard(os.path.join(out, f"{name}.bin"), tokens)
        print(f"{name}.bin: {count} tokens, {len(set(tokens))} distinct symbols, seed {seed}")


if __name__ == "__main__":
    main()
