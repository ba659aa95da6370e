#!/usr/bin/env python3
"""Paired step times of two mantissa-run arms on a shared, noisy machine.

The two arms run at the same time, each pinned to its own core with one
OpenMP thread, then again with the cores swapped, so that what the host
does to one run it mostly does to the other. Each run's step time is the
median of its per-step times (mantissa-run --metrics) after the first two
steps; each pair gives the ratio of the second arm's to the first's. The
median of those ratios is the figure to report, with their range.

usage: bench/step/paired.py [--rounds R] [--steps N] [--model M]
                            NAME=BIN[:ARGS] NAME=BIN[:ARGS]
  BIN   a directory holding mantissa-run (a build's bin/)
  ARGS  mantissa-run flags, space separated (e.g. "--precision spec.yaml")
e.g. bench/step/paired.py fp32=build/bin "bf16=build/bin:--precision-compute bf16"

Needs two cores. Each arm compiles into its own cache (MANTISSA_CACHE_DIR
under a temporary directory) before the rounds, so no round compiles.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_arm(text):
    name, sep, rest = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"'{text}': expected NAME=BIN[:ARGS]")
    binary, _, args = rest.partition(":")
    if not os.access(os.path.join(binary, "mantissa-run"), os.X_OK):
        raise argparse.ArgumentTypeError(f"'{text}': no mantissa-run in {binary}")
    return name, binary, args.split()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="rounds of two pairs (sides swapped)")
    parser.add_argument("--steps", type=int, default=200, help="steps per run")
    parser.add_argument("--model", default="llama_medium", help="a model of the corpus")
    parser.add_argument("--corpus", default=os.environ.get(
        "MANTISSA_CORPUS_DIR", os.path.join(ROOT, "test", "Inputs", "corpus")))
    parser.add_argument("arms", nargs=2, type=parse_arm, metavar="NAME=BIN[:ARGS]")
    options = parser.parse_args()
    if options.steps < 5 or options.rounds < 1:
        parser.error("--steps must be at least 5 and --rounds at least 1")
    if (os.cpu_count() or 1) < 2:
        parser.error("paired runs need two cores")
    model = os.path.join(options.corpus, options.model)
    if not os.path.exists(model + ".pt2"):
        parser.error(f"no {model}.pt2 (--corpus, --model)")
    work = tempfile.mkdtemp(prefix="mantissa-paired-")
    try:
        run_pairs(options, model, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_pairs(options, model, work):

    def command(arm, index, cpu, steps, metrics):
        name, binary, args = arm
        env = dict(os.environ, OMP_NUM_THREADS="1",
                   MANTISSA_CACHE_DIR=os.path.join(work, f"cache{index}"))
        return (["taskset", "-c", str(cpu), os.path.join(binary, "mantissa-run"), model + ".pt2",
                 "--inputs", model + ".inputs.safetensors", "--weights", model + ".init.safetensors",
                 "--steps", str(steps), "--no-memory-report", "--metrics", metrics] + args, env)

    arms = options.arms
    for index, arm in enumerate(arms):  # compile each arm once, untimed
        cmd, env = command(arm, index, 0, 2, os.devnull)
        result = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if result.returncode != 0:
            sys.exit(f"{arm[0]}: mantissa-run failed:\n{result.stderr}")
    medians = {arm[0]: [] for arm in arms}
    ratios = []
    for _ in range(options.rounds):
        for swap in (0, 1):
            runs = []
            for index, arm in enumerate(arms):
                metrics = os.path.join(work, f"metrics{index}.jsonl")
                cmd, env = command(arm, index, index ^ swap, options.steps, metrics)
                runs.append((subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL), metrics))
            step_ms = []
            for (process, metrics), arm in zip(runs, arms):
                if process.wait() != 0:
                    sys.exit(f"{arm[0]}: mantissa-run failed (rerun it alone to see why)")
                with open(metrics) as lines:
                    times = [json.loads(line)["seconds"] * 1e3 for line in lines][2:]
                step_ms.append(statistics.median(times))
            for ms, arm in zip(step_ms, arms):
                medians[arm[0]].append(ms)
            ratios.append(step_ms[1] / step_ms[0])
    first, second = arms[0][0], arms[1][0]
    print(f"{options.model}, {options.steps} steps a run, {2 * options.rounds} pairs, 1 thread each")
    for name in medians:
        print(f"{name:>12} run medians (ms): " + " ".join(f"{x:.2f}" for x in medians[name]))
    print(f"{second}/{first} ratios: " + " ".join(f"{x:.3f}" for x in ratios))
    print(f"{second}/{first}: median {statistics.median(ratios):.3f}, "
          f"range {min(ratios):.3f} to {max(ratios):.3f}")


if __name__ == "__main__":
    main()
