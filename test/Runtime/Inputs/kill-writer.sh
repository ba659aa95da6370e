#!/bin/bash
# kill-writer.sh RUN ARTIFACT GRADS DIR ROUNDS: starts a run that checkpoints
# every step, kills it with SIGKILL after a random delay, and checks that the
# checkpoint left behind (if any was committed) loads; ROUNDS times.
set -u
RUN=$1 ART=$2 GRADS=$3 DIR=$4 ROUNDS=$5
rm -rf "$DIR"
# The first checkpoint, so that there is always a previous one.
"$RUN" "$ART" --grads "$GRADS" --steps 1 --save-checkpoint "$DIR" --save-every 1 --no-memory-report || exit 1
RANDOM=42
for round in $(seq 1 "$ROUNDS"); do
  "$RUN" "$ART" --grads "$GRADS" --steps 100000 --resume "$DIR" --save-checkpoint "$DIR" --save-every 1 --keep-checkpoints 2 --no-memory-report >/dev/null 2>&1 &
  pid=$!
  sleep "0.$(printf '%03d' $((RANDOM % 400)))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if ! out=$("$RUN" "$ART" --verify-checkpoint "$DIR" 2>&1); then
    echo "round $round: the checkpoint does not load: $out"
    exit 1
  fi
done
echo "killed $ROUNDS writers; the checkpoint always loaded"
