#!/bin/bash
# leftovers.sh make DIR: lays out what killed compiles leave in DIR (an
# artifact DIR/out being written, `.tmp.PID`) and in the cache DIR/cache,
# for a process that is gone (D) and one that lives (L, a sleep), with one
# cache entry's lock held by a live process.
# leftovers.sh check DIR: says which of them are still there, and ends the
# live processes.
set -u
MODE=$1 DIR=$2
if [ "$MODE" = make ]; then
  true & dead=$!
  wait $dead
  setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! > "$DIR/live.pid"
  live=$(cat "$DIR/live.pid")
  mkdir -p "$DIR/cache" "$DIR/out.tmp.$dead/sub" "$DIR/out.tmp.$live"
  touch "$DIR/cache/step-aa.so.lock" "$DIR/cache/step-bb.so.lock"
  echo half > "$DIR/cache/step-aa.so.tmp.$dead"
  echo half > "$DIR/cache/step-bb.so.tmp.$dead"
  echo half > "$DIR/cache/step-cc.so.tmp.$live"
  setsid flock "$DIR/cache/step-bb.so.lock" sleep 600 </dev/null >/dev/null 2>&1 &
  echo $! > "$DIR/holder.pid"
  # Until the holder has the lock.
  until ! flock -n "$DIR/cache/step-bb.so.lock" true; do sleep 0.05; done
  echo $dead > "$DIR/dead.pid"
  exit 0
fi
dead=$(cat "$DIR/dead.pid") live=$(cat "$DIR/live.pid")
for path in "out.tmp.$dead" "out.tmp.$live" "cache/step-aa.so.tmp.$dead" \
  "cache/step-bb.so.tmp.$dead" "cache/step-cc.so.tmp.$live"; do
  what=${path//$dead/DEAD}
  what=${what//$live/LIVE}
  if [ -e "$DIR/$path" ]; then echo "kept $what"; else echo "removed $what"; fi
done
kill "$(cat "$DIR/holder.pid")" "$live" 2>/dev/null
exit 0
