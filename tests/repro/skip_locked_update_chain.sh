#!/usr/bin/env bash
# A claim (or promote) that locks with FOR UPDATE SKIP LOCKED waits for another
# session's row: PostgreSQL's update-chain step, shown step by step with gdb
# pausing the backends at chosen points of heapam.c. Not part of the suite.
#
#   tests/repro/skip_locked_update_chain.sh claim-claim|claim-ack|promote-promote|promote-claim
#
# Run from the repository root, as a user that may ptrace the server's
# backends (root, or the server's OS user with ptrace allowed), on the
# server's host. Needs gdb, psql and cargo; connects as psql would (PGHOST,
# PGPORT, PGUSER: a superuser, PGDATABASE); creates the engine schema
# $SCHEMA (default skip_locked_repro) with the product's own script, and runs
# the product's statements (`schema-gen statements`) as prepared statements.
# The register names below are x86-64's (the calls' arguments).
#
# The interleaving: U updates job 1 in an open transaction. A's statement
# reaches job 1's old version; heap_lock_tuple sees U in progress and, for
# SKIP LOCKED, tries ConditionalXactLockTableWait(U): gdb pauses A there. U
# commits. W takes job 1's newer version and keeps its transaction open
# (claim-claim, promote-promote: W is a second claimer/promoter whose statement
# saw job 1's old version too, locked the newer one, found it no longer
# qualifies and skipped it, keeping the lock; claim-ack: W is the ack of U's
# claim; promote-claim: W claims the job U promoted). A goes on: U is done,
# so it does not skip; it calls heap_lock_updated_tuple, which locks the
# newer versions with no wait policy and waits for W (XactLockTableWait,
# XLTW_LockUpdated: "while locking updated version (0,4) of tuple").
set -euo pipefail
CASE=${1:-}
case $CASE in
  claim-claim|claim-ack) MINE=claim ;;
  promote-promote|promote-claim) MINE=promote ;;
  *) echo "usage: $0 claim-claim|claim-ack|promote-promote|promote-claim" >&2; exit 2 ;;
esac
SCHEMA=${SCHEMA:-skip_locked_repro}
NOW=1700000000
DUE=$((NOW + 100))
WD=$(mktemp -d)
STARTED=()
cleanup() { for p in "${STARTED[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WD"; }
trap cleanup EXIT
PSQL=(psql -X -q -A -t -v ON_ERROR_STOP=0)

cargo run -q -p schema-gen -- sql --schema "$SCHEMA" |
  PGOPTIONS='-c client_min_messages=warning' "${PSQL[@]}" -v ON_ERROR_STOP=1 > /dev/null
cargo run -q -p schema-gen -- statements --schema "$SCHEMA" --format sql > "$WD/statements.sql"
# stmt NAME: the product's statement NAME.
stmt() {
  awk -v name="-- $1" '$0 == name {grab = 1; next} grab && /^--/ {next} grab && NF {print; exit}' \
    "$WD/statements.sql" | sed 's/;$//'
}

# Sessions: psql fed through a fifo; `run` waits for the answer.
declare -A MARK
session() {
  local n=$1
  mkfifo "$WD/$n.in"
  "${PSQL[@]}" < "$WD/$n.in" > "$WD/$n.out" 2>&1 &
  STARTED+=($!)
  eval "exec {fd_$n}>\"$WD/$n.in\""
  MARK[$n]=0
  send "$n" '\set VERBOSITY verbose'
  send "$n" '\set SHOW_CONTEXT always'
}
send() { local n=$1; shift; local fd="fd_$n"; printf '%s\n' "$*" >&"${!fd}"; }
answered_within() {
  local n=$1 tries=$2
  MARK[$n]=$((MARK[$n] + 1))
  local m="@@done-$n-${MARK[$n]}"
  send "$n" "\\echo $m"
  for _ in $(seq "$tries"); do
    grep -q -- "$m" "$WD/$n.out" && return 0
    sleep 0.05
  done
  return 1
}
run() { local n=$1; shift; send "$n" "$*"; answered_within "$n" 400 || { echo "session $n is stuck" >&2; exit 1; }; }
out() { { grep -v '^@@done\|^$\|^pid=' "$WD/$1.out" || true; } | cut -c1-150 | sed 's/^/   /'; }
pid_of() { run "$1" "SELECT 'pid=' || pg_backend_pid();"; grep -o 'pid=[0-9]*' "$WD/$1.out" | tail -1 | cut -d= -f2; }

# gdb attached to a backend, fed through a fifo.
gdb_attach() {
  local n=$1 pid=$2
  mkfifo "$WD/gdb-$n.in"
  gdb -q -nx -p "$pid" < "$WD/gdb-$n.in" > "$WD/gdb-$n.out" 2>&1 &
  STARTED+=($!)
  eval "exec {gfd_$n}>\"$WD/gdb-$n.in\""
  gdb_cmd "$n" "set pagination off" "set confirm off" \
    "handle SIGUSR1 SIGUSR2 SIGINT SIGTERM SIGQUIT SIGPIPE SIGALRM nostop noprint pass" \
    'echo @@attached\n'
  gdb_wait "$n" "@@attached"
}
gdb_cmd() { local n=$1; shift; local fd="gfd_$n"; printf '%s\n' "$@" >&"${!fd}"; }
gdb_go() { gdb_cmd "$1" "continue"; gdb_wait "$1" "Continuing"; }
gdb_wait() {
  for _ in $(seq 400); do grep -Eq -- "$2" "$WD/gdb-$1.out" && return 0; sleep 0.05; done
  echo "gdb $1: no '$2'" >&2; cat "$WD/gdb-$1.out" >&2; exit 1
}
gdb_detach() { gdb_cmd "$1" "delete" "detach" "quit"; local fd="gfd_$1"; eval "exec {$fd}>&-"; sleep 0.3; }
# heap_lock_tuple(rel, tuple, cid, mode, wait_policy, follow_updates, ...):
#   mode 3 = LockTupleExclusive (FOR UPDATE), wait_policy 1 = LockWaitSkip.
# XactLockTableWait(xid, rel, ctid, oper): oper 4 = XLTW_LockUpdated.
TRACE_LOCK_TUPLE=("break heap_lock_tuple" "commands" "silent"
  'printf "@@ heap_lock_tuple(mode=%d, wait_policy=%d, follow_updates=%d)\n", $rcx, $r8, $r9 & 0xff'
  "continue" "end")
PAUSE_COND_WAIT=("break ConditionalXactLockTableWait" "commands" "silent"
  'printf "@@ ConditionalXactLockTableWait(xid=%u): paused here\n", $rdi' "end")
TRACE_XACT_WAIT=("break XactLockTableWait" "commands" "silent"
  'printf "@@ XactLockTableWait(xid=%u, oper=%d)\n", $rdi, $rcx' "bt 3" "end")

if [ "$MINE" = claim ]; then READY_AT=$((NOW - 10)); AT=$NOW; else READY_AT=$((NOW + 10)); AT=$DUE; fi
statement() {
  if [ "$1" = claim ]; then echo "EXECUTE claim('$2', $AT, 'q', 1);"; else echo "EXECUTE promote('q', $AT, 1);"; fi
}

session mon
run mon "TRUNCATE $SCHEMA.jobs;"
run mon "PREPARE enqueue(text, bytea, integer, bigint, bigint, bigint, bigint, integer, bigint, bigint, bigint) AS $(stmt enqueue);"
for priority in 3 2 1; do
  run mon "EXECUTE enqueue('q', 'p', $priority, $READY_AT, NULL, $((NOW - 100)), 30, 5, 1, 60, $NOW);"
done
FIRST=$(psql -X -A -t -c "SELECT min(id) FROM $SCHEMA.jobs")
PAGEINSPECT=$(psql -X -A -t -c "SELECT count(*) FROM pg_available_extensions WHERE name = 'pageinspect'")
[ "$PAGEINSPECT" = 1 ] && run mon "SET client_min_messages = warning; CREATE EXTENSION IF NOT EXISTS pageinspect;"
for s in A U W; do
  session $s
  run $s "PREPARE claim(text, bigint, text, bigint) AS $(stmt claim);"
  run $s "PREPARE promote(text, bigint, bigint) AS $(stmt promote);"
  run $s "PREPARE ack(bigint, text, integer) AS $(stmt ack);"
  run $s "SET lock_timeout = '60s'; SET log_lock_waits = on; SET deadlock_timeout = '100ms'; SET client_min_messages = log;"
done
A=$(pid_of A); U=$(pid_of U); W=$(pid_of W)
echo "== $CASE: jobs $FIRST.. (priority 3, 2, 1); backends A=$A (waits) U=$U W=$W"

echo "1. U: BEGIN; $MINE (limit 1): takes job $FIRST, keeps its transaction open"
run U "BEGIN;"; run U "$(statement $MINE U)"
if [ "$CASE" = claim-claim ] || [ "$CASE" = promote-promote ]; then
  echo "2. W: BEGIN; $MINE (limit 1); gdb pauses it at its first heap_lock_tuple (job $FIRST's old version)"
  run W "BEGIN;"
  gdb_attach W "$W"; gdb_cmd W "break heap_lock_tuple"; gdb_go W
  send W "$(statement $MINE W)"
  gdb_wait W "Breakpoint 1, .*heap_lock_tuple"
fi
echo "3. A: BEGIN; $MINE (limit 1); gdb pauses it at ConditionalXactLockTableWait"
run A "BEGIN;"
gdb_attach A "$A"; gdb_cmd A "${TRACE_LOCK_TUPLE[@]}" "${PAUSE_COND_WAIT[@]}"; gdb_go A
send A "$(statement $MINE A)"
gdb_wait A "@@ ConditionalXactLockTableWait"
echo "4. U: COMMIT"
run U "COMMIT;"
case $CASE in
  claim-claim|promote-promote)
    echo "5. W goes on: locks job $FIRST's newer version, which no longer qualifies, skips it (keeping the lock),"
    echo "   takes job $((FIRST + 1)); its transaction stays open"
    gdb_detach W; answered_within W 400 ;;
  claim-ack)
    echo "5. W: BEGIN; ack of U's claim (job $FIRST, 'U', 1); stays open"
    run W "BEGIN;"; run W "EXECUTE ack($FIRST, 'U', 1);" ;;
  promote-claim)
    echo "5. W: BEGIN; claim (limit 1): takes job $FIRST, just promoted; stays open"
    run W "BEGIN;"; run W "$(statement claim W)" ;;
esac
echo "6. A goes on from ConditionalXactLockTableWait(U): U is done, so A does not skip"
gdb_cmd A "${TRACE_XACT_WAIT[@]}" "continue"
gdb_wait A "@@ XactLockTableWait"
sleep 0.5
grep -E '^(@@|#[0-9])' "$WD/gdb-A.out" | sed 's/^/   gdb: /'
gdb_detach A
if answered_within A 20; then echo "   A answered without waiting"; else echo "   A is WAITING"; fi
echo "7. While A waits:"
run mon "SELECT format('pg_locks: pid %s %s %s on %s, granted %s', l.pid, l.locktype, l.mode,
  CASE l.locktype WHEN 'transactionid' THEN 'transaction ' || l.transactionid
    ELSE format('%s (%s,%s)', l.relation::regclass, l.page, l.tuple) END, l.granted)
  FROM pg_locks l WHERE l.pid IN ($A, $U, $W) AND l.locktype IN ('transactionid', 'tuple') ORDER BY l.pid, l.granted;"
run mon "SELECT format('pg_stat_activity: pid %s (%s) %s/%s, %s: %s', pid,
  CASE pid WHEN $A THEN 'A' WHEN $U THEN 'U' ELSE 'W' END, wait_event_type, wait_event, state, query)
  FROM pg_stat_activity WHERE pid IN ($A, $U, $W) ORDER BY pid;"
run mon "SELECT format('pg_blocking_pids(%s) = %s', $A, pg_blocking_pids($A));"
if [ "$PAGEINSPECT" = 1 ]; then
  run mon "SELECT format('heap (0,%s): xmin %s xmax %s ctid %s %s', lp, t_xmin, t_xmax, t_ctid,
    (SELECT string_agg(f, ' ') FROM unnest(raw_flags) f WHERE f ~ 'XMAX|KEYS'))
    FROM heap_page_items(get_raw_page('$SCHEMA.jobs', 0)) i,
    LATERAL heap_tuple_infomask_flags(t_infomask, t_infomask2) WHERE t_xmin IS NOT NULL ORDER BY lp;"
fi
out mon | grep -v '^   [0-9]*$'
echo "8. W: COMMIT; A finishes"
run W "COMMIT;"
answered_within A 400
run A "COMMIT;"
for s in U W A; do echo "[$s]"; out $s; done
