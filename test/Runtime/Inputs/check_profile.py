"""Checks --profile's lines (StepProfile.h): one per rank, each phase and
"other" adding up to the step (to the rounding of the printed figures)."""
import re
import sys

path, world = sys.argv[1], int(sys.argv[2])
lines = [l for l in open(path) if l.startswith("profile: ")]
if len(lines) != world:
    sys.exit("%d profile lines, expected %d" % (len(lines), world))
for line in lines:
    body, step = line.rsplit("; step ", 1)
    # Drop the collectives' share, which is inside its phase.
    body = re.sub(r" \(communication [0-9.]+\)", "", body.split(":", 2)[2])
    phases = [float(part.rsplit(" ", 1)[1]) for part in body.split(",")]
    if len(phases) != 7:
        sys.exit("expected 6 phases and other: " + line)
    if abs(sum(phases) - float(step)) > 0.05 * len(phases) + 0.05:
        sys.exit("the phases add up to %.1f, the step is %s" % (sum(phases), step))
print("phases add up to the step on every rank")
