#!/usr/bin/env bash
# The README's test command RUNS times in a row, with every core kept busy by another process
# the whole time (a CPU load like a build beside it), or on a quiet machine with --quiet.
# A suite that passes only on an idle machine is flaky: issue 46 asks for three green runs each
# way. Prints one line per run and exits non-zero if any run failed; each run's output is kept
# in $LOG_DIR (default /tmp/duet-busy-suite).
#   usage: scripts/busy_suite.sh [RUNS] [--quiet] [-- PYTEST ARGS...]
set -uo pipefail
cd "$(dirname "$0")/.."
runs=3 quiet=0 extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --quiet) quiet=1 ;;
        --) shift; extra=("$@"); break ;;
        *) runs="$1" ;;
    esac
    shift
done
log_dir="${LOG_DIR:-/tmp/duet-busy-suite}"
mkdir -p "$log_dir"
load_pids=()
stop_load() { [ ${#load_pids[@]} -gt 0 ] && kill "${load_pids[@]}" 2>/dev/null; load_pids=(); }
trap stop_load EXIT
if [ "$quiet" = 0 ]; then
    for _ in $(seq "$(nproc)"); do  # one spinning process per core, at normal priority
        python3 -c "while True: pass" &
        load_pids+=($!)
    done
fi
failed=0
for i in $(seq "$runs"); do
    start=$(date +%s)
    ./test.sh "${extra[@]}" >"$log_dir/run-$i.log" 2>&1
    rc=$?
    summary=$(grep -E "passed|failed|error" "$log_dir/run-$i.log" | tail -1)
    echo "run $i/$runs ($([ "$quiet" = 1 ] && echo quiet || echo busy)): exit $rc in $(( $(date +%s) - start )) s: $summary"
    [ "$rc" = 0 ] || failed=1
done
exit $failed
