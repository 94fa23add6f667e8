#!/usr/bin/env bash
# The whole suite, run N times in a row beside two CPU-burning processes
# (issue 27's "Done when"): stops at the first failing run. Not part of the
# suite itself.
#
#   tests/repro/suite_beside_burners.sh [RUNS] [LOG_DIR]
#
# Run from the repository root on a machine with what `.ci/run` installs
# (the harness starts its own throwaway clusters, pgbouncer and Citus).
# Builds the tests first (outside the count), then per run: starts two
# `yes > /dev/null`, runs `INSTA_UPDATE=no cargo test --workspace --locked`,
# stops the burners, and appends the run's exit code, wall time and the
# 1/5/15-minute load average at its end to LOG_DIR/runs.txt; each run's
# output is LOG_DIR/run-N.log.
set -uo pipefail
RUNS=${1:-20}
LOG_DIR=${2:-target/suite-beside-burners}
mkdir -p "$LOG_DIR"
SUMMARY=$LOG_DIR/runs.txt
BURNERS=()
stop_burners() {
  for pid in "${BURNERS[@]}"; do kill "$pid" 2>/dev/null; done
  BURNERS=()
}
trap stop_burners EXIT

INSTA_UPDATE=no cargo test --workspace --locked --no-run >"$LOG_DIR/build.log" 2>&1 || {
  echo "build failed: see $LOG_DIR/build.log" >&2
  exit 2
}
echo "commit $(git rev-parse --short HEAD), $(nproc) cores, started $(date -u +%FT%TZ)" >>"$SUMMARY"
for run in $(seq "$RUNS"); do
  yes >/dev/null & BURNERS+=($!)
  yes >/dev/null & BURNERS+=($!)
  start=$(date +%s)
  INSTA_UPDATE=no cargo test --workspace --locked >"$LOG_DIR/run-$run.log" 2>&1
  rc=$?
  wall=$(($(date +%s) - start))
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  stop_burners
  echo "run $run: exit $rc, wall ${wall} s, load $load, ended $(date -u +%T)" >>"$SUMMARY"
  if [ "$rc" -ne 0 ]; then
    echo "run $run failed: see $LOG_DIR/run-$run.log" >&2
    exit 1
  fi
done
echo "$RUNS runs green" >>"$SUMMARY"
