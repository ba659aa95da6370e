#!/bin/bash
# interrupt.sh SIGNAL LOG COMMAND...: runs COMMAND in the background with its
# stdout in LOG (stderr in LOG.err), sends it SIGNAL once LOG shows step 3,
# waits for it and prints "exit STATUS".
set -u
SIGNAL=$1 LOG=$2
shift 2
"$@" > "$LOG" 2> "$LOG.err" &
pid=$!
for _ in $(seq 1 600); do
  grep -q "^step 3/" "$LOG" 2>/dev/null && break
  sleep 0.05
done
kill -s "$SIGNAL" "$pid"
wait "$pid"
echo "exit $?"
