#!/bin/bash
# busy-folder.sh RUN ARTIFACT GRADS DIR: a run holding DIR (checkpointing
# every step) refuses a second run into DIR, even one that resumes the same
# run; SIGKILLed, its lock is free again and the folder resumes, with what
# the killed writer left removed.
set -u
RUN=$1 ART=$2 GRADS=$3 DIR=$4
common=(--grads "$GRADS" --no-memory-report --save-every 1 --keep-checkpoints 2)
rm -rf "$DIR"
"$RUN" "$ART" "${common[@]}" --steps 100000000 --save-checkpoint "$DIR" \
  >/dev/null 2>&1 &
holder=$!
trap 'kill -9 $holder 2>/dev/null' EXIT
# Until it has committed a checkpoint (its lock is taken before step 1);
# with --keep-checkpoints 2 any one folder may already be gone.
committed() { ls "$DIR" 2>/dev/null | grep -q '^step-[0-9]*$'; }
until committed || ! kill -0 $holder 2>/dev/null; do sleep 0.05; done
if ! kill -0 $holder 2>/dev/null; then
  echo "the first run ended early"
  exit 1
fi
echo "second run, new:"
"$RUN" "$ART" "${common[@]}" --steps 3 --save-checkpoint "$DIR" 2>&1
echo "exit $?"
echo "second run, resuming the same run:"
"$RUN" "$ART" "${common[@]}" --steps 100000000 --resume "$DIR" \
  --save-checkpoint "$DIR" 2>&1
echo "exit $?"
kill -9 $holder
wait $holder 2>/dev/null
step=$("$RUN" "$ART" --verify-checkpoint "$DIR" |
  sed -n 's/.*: step \([0-9]*\) loads.*/\1/p')
# What a kill mid-save leaves, whether or not this one did.
mkdir -p "$DIR/step-99999999.tmp"
echo "after the kill:"
"$RUN" "$ART" --grads "$GRADS" --no-memory-report --steps $((step + 1)) \
  --resume "$DIR" --save-checkpoint "$DIR" --save-every 1 2>&1 |
  grep -v '^step '
echo "exit ${PIPESTATUS[0]}"
ls "$DIR"
