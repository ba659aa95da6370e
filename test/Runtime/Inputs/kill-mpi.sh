#!/bin/bash
# kill-mpi.sh RUN ARTIFACT GRADS DIR ROUNDS NP MPIRUN...: starts an NP-rank job
# (MPIRUN... -np NP RUN ...) that resumes from and checkpoints to DIR every
# step, and SIGKILLs the launcher and every rank at once after a random
# delay; ROUNDS times. After every kill the checkpoint left behind must load,
# be at the previous round's step or later, and resume (at NP ranks) to
# parameters bit-identical to an uninterrupted single-rank run to the same
# step.
set -u
RUN=$1 ART=$2 GRADS=$3 DIR=$4 ROUNDS=$5 NP=$6
shift 6
MPIRUN=("$@")
OUT="$DIR.out"
rm -rf "$DIR" "$OUT"
mkdir -p "$OUT"
common=(--grads "$GRADS" --no-memory-report)

# The first checkpoint, so that there is always a previous one.
"${MPIRUN[@]}" -np "$NP" "$RUN" "$ART" "${common[@]}" --steps 1 \
  --save-checkpoint "$DIR" --save-every 1 || exit 1
RANDOM=20261130
last=1
mid=0
for round in $(seq 1 "$ROUNDS"); do
  # setsid: the job gets its own session. mpirun puts each rank in a process
  # group of its own, so the kill goes to every process of the session (the
  # launcher and all ranks) in one call, as a node failure would.
  setsid "${MPIRUN[@]}" -np "$NP" "$RUN" "$ART" "${common[@]}" \
    --steps 1000000 --resume "$DIR" --save-checkpoint "$DIR" \
    --save-every 1 --keep-checkpoints 2 >/dev/null 2>&1 &
  pid=$!
  sleep "0.$(printf %03d $((300 + RANDOM % 600)))"
  kill -9 $(ps -o pid= -s "$pid") 2>/dev/null
  wait "$pid" 2>/dev/null
  # No rank may outlive the kill and write after it (zombies waiting to be
  # reaped cannot write).
  alive() { ps -o pid=,stat= -s "$pid" | awk '$2 !~ /^Z/ { print $1 }'; }
  while [ -n "$(alive)" ]; do
    kill -9 $(alive) 2>/dev/null
    sleep 0.01
  done
  if ls "$DIR" | grep -q '\.tmp$'; then
    mid=$((mid + 1)) # the kill landed while a checkpoint was being written
  fi

  if ! out=$("$RUN" "$ART" --verify-checkpoint "$DIR" 2>&1); then
    echo "round $round: the checkpoint does not load: $out"
    exit 1
  fi
  step=$(echo "$out" | sed -n 's/.*: step \([0-9]*\) loads.*/\1/p')
  if [ -z "$step" ] || [ "$step" -lt "$last" ]; then
    echo "round $round: the checkpoint went back from step $last to '$step'"
    exit 1
  fi
  last=$step

  # Resuming reaches the uninterrupted run's bits.
  target=$((step + 2))
  "${MPIRUN[@]}" -np "$NP" "$RUN" "$ART" "${common[@]}" --steps "$target" \
    --resume "$DIR" --final-params "$OUT/resumed.safetensors" || {
    echo "round $round: resuming from step $step failed"
    exit 1
  }
  "$RUN" "$ART" "${common[@]}" --steps "$target" \
    --final-params "$OUT/straight.safetensors" || exit 1
  if ! cmp -s "$OUT/resumed.safetensors" "$OUT/straight.safetensors"; then
    echo "round $round: resumed from step $step, step $target differs from" \
      "the uninterrupted run"
    exit 1
  fi
done
echo "killed $ROUNDS $NP-rank jobs (checkpoints reached step $last," \
  "$mid kills left a file half-written); the checkpoint always loaded" \
  "and resumed to the uninterrupted bits"
