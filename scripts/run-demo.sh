#!/usr/bin/env bash
# Runs the demo workload and the collector that profiles it, until Ctrl-C or
# DURATION, then stops both cleanly. Called by `make run` (from the
# repository root: CONFIG defaults to testdata/demo.yaml, whose trace files
# go to _build/traces).
set -euo pipefail
: "${COLLECTOR:?}" "${DEMO:?}" "${CONFIG:=testdata/demo.yaml}" "${DURATION:=60s}"

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
# The tracefile exporter of the default config kept the run: show what the CLI makes of it.
if [ -n "${CLI:-}" ] && [ -x "$CLI" ] && [ -d _build/traces ]; then
  echo "run-demo: $CLI report _build/traces (the trace files of this and earlier runs)"
  "$CLI" report --top 10 --groups 3 _build/traces > _build/report.txt || true
  head -n 60 _build/report.txt
  echo "run-demo: where the slowest uploads' time went: $CLI report --span 'POST /upload' --slowest 5 _build/traces"
  echo "run-demo: the page (click a span bar, or a name in the spans panel): $CLI html _build/traces -o _build/perfprof.html"
  echo "run-demo: more: $CLI folded _build/traces, $CLI pprof _build/traces -o out.pb.gz"
fi
