#!/usr/bin/env bash
# Runs the demo workload and the collector that profiles it, until Ctrl-C or
# DURATION, then stops both cleanly. Called by `make run`.
set -euo pipefail
: "${COLLECTOR:?}" "${DEMO:?}" "${CONFIG:?}" "${DURATION:=60s}"

"$DEMO" &
demo=$!
"$COLLECTOR" --config "$CONFIG" --feature-gates=service.profilesSupport &
collector=$!

# The demo stops first, so that its last spans reach the collector, whose
# final report then joins the last samples.
stop() {
  kill -TERM "$demo" 2>/dev/null || true
  wait "$demo" 2>/dev/null || true
  kill -TERM "$collector" 2>/dev/null || true
  wait "$collector" 2>/dev/null || true
}
trap 'echo "run-demo: interrupted, stopping"; stop; exit 0' INT TERM

secs=$(awk -v d="$DURATION" 'BEGIN {
  n = d + 0; u = substr(d, length(n "") + 1)
  if (u == "m") n *= 60; else if (u == "h") n *= 3600
  print int(n) }')
echo "run-demo: profiling the demo (pid $demo) for ${secs}s; Ctrl-C stops earlier"
for ((i = 0; i < secs; i++)); do
  if ! kill -0 "$collector" 2>/dev/null; then
    echo "run-demo: the collector exited" >&2
    wait "$collector" || status=$?
    kill -TERM "$demo" 2>/dev/null || true
    exit "${status:-1}"
  fi
  sleep 1
done
stop
echo "run-demo: done"
