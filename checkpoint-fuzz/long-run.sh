#!/usr/bin/env bash
# A long fuzzing run of the `#[workflow]` transform, in batches.
#
#   checkpoint-fuzz/long-run.sh SEED [SEED...]
#
# For every seed, compiles and runs programs START..START+TOTAL of that seed
# in batches of BATCH (one test crate per batch: a crate of 1,000 programs
# took 30 minutes and ~12 GB to compile; a debug build of 300 takes about
# 3.5 minutes on 2 cores, and compiling dominates: the runs take seconds),
# and prints per-batch, per-seed and total figures: programs, programs that
# took checkpoints, crash points checked, programs refused at save as
# expected, failures. Environment:
#
#   TOTAL=1000   programs per seed          BATCH=300   programs per batch
#   START=0      first index                SIZE=30     program size
#   FORMS=       CHECKPOINT_FUZZ_FORMS      PROFILE=debug (or release)
#   LOG_DIR=target/fuzz-long                full output of every batch
#
# A failing batch's log holds each failing program with its seed and index;
# shrink it with `cargo run -p checkpoint-fuzz --bin shrink -- --seed S
# --index I` (same --size and --forms). A program that does not compile is
# left out of its batch (CHECKPOINT_FUZZ_SKIP) and counted as failed; its
# errors stay in LOG_DIR. Exit status: 1 if anything failed.
set -u
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,20p' "$0"; exit 2; }
TOTAL=${TOTAL:-1000}
BATCH=${BATCH:-300}
START=${START:-0}
SIZE=${SIZE:-30}
FORMS=${FORMS:-}
PROFILE=${PROFILE:-debug}
LOG_DIR=${LOG_DIR:-target/fuzz-long}
mkdir -p "$LOG_DIR"
flag=()
[ "$PROFILE" = release ] && flag=(--release)

printf '%-12s %7s %7s %6s %10s %11s %7s %6s %6s\n' seed first programs cps crash_pts refused failed secs status
t_prog=0 t_cp=0 t_crash=0 t_ref=0 t_fail=0 t_secs=0 bad=0
for seed in "$@"; do
  s_prog=0 s_cp=0 s_crash=0 s_ref=0 s_fail=0 s_secs=0
  first=$START
  while [ "$first" -lt $((START + TOTAL)) ]; do
    n=$BATCH
    [ $((first + n)) -gt $((START + TOTAL)) ] && n=$((START + TOTAL - first))
    log="$LOG_DIR/seed-$seed-from-$first.log"
    t0=$(date +%s)
    skip=""
    for attempt in 1 2 3 4; do
      CHECKPOINT_FUZZ_SEED=$seed CHECKPOINT_FUZZ_START=$first CHECKPOINT_FUZZ_COUNT=$n \
        CHECKPOINT_FUZZ_SIZE=$SIZE CHECKPOINT_FUZZ_FORMS=$FORMS CHECKPOINT_FUZZ_SKIP=$skip \
        cargo test -p checkpoint-fuzz "${flag[@]}" --test fuzz -- --nocapture >"$log" 2>&1
      rc=$?
      grep -qE '^[0-9]+ programs \(seed' "$log" && break
      # A program that does not compile fails the whole crate: find which
      # (the error's line in the generated programs.rs), keep its errors,
      # and build the batch again without it.
      new=$(grep -oE -- '--> [^ ]*/out/programs\.rs:[0-9]+' "$log" | sort -u | while read -r _ loc; do
        file=${loc%:*}; line=${loc##*:}
        awk -v L="$line" 'NR <= L && /^mod p[0-9]+ \{/ { m = $2 } NR == L { sub(/^p/, "", m); print m; exit }' "$file"
      done | sort -un | paste -sd, -)
      [ -n "$new" ] || break
      cp "$log" "$log.compile-errors-$attempt"
      echo "    did not compile: seed $seed index $new (errors in $log.compile-errors-$attempt)"
      skip=${skip:+$skip,}$new
    done
    secs=$(($(date +%s) - t0))
    # "N programs (seed S, first index F), C took checkpoints, P crash points
    # checked, R refused as expected, X failed (K did not compile)"
    line=$(grep -E '^[0-9]+ programs \(seed' "$log" | tail -1)
    if [ -z "$line" ]; then
      status="NO-SUMMARY(rc=$rc)"
      prog=0 cp=0 crash=0 ref=0 fail=$n
      bad=1
    else
      read -r prog cp crash ref fail < <(echo "$line" | sed -E \
        's/^([0-9]+) programs .*\), ([0-9]+) took checkpoints, ([0-9]+) crash points checked, ([0-9]+) refused as expected, ([0-9]+) failed.*/\1 \2 \3 \4 \5/')
      status=ok
      if [ "$rc" -ne 0 ] || [ "$fail" -ne 0 ]; then status="FAILED(rc=$rc)"; bad=1; fi
    fi
    printf '%-12s %7s %7s %6s %10s %11s %7s %6s %6s\n' "$seed" "$first" "$prog" "$cp" "$crash" "$ref" "$fail" "$secs" "$status"
    grep -E '^=== FAILED' "$log" | sed 's/ (forms .*//' | sed 's/^/    /'
    s_prog=$((s_prog + prog)) s_cp=$((s_cp + cp)) s_crash=$((s_crash + crash))
    s_ref=$((s_ref + ref)) s_fail=$((s_fail + fail)) s_secs=$((s_secs + secs))
    first=$((first + n))
  done
  printf '%-12s %7s %7s %6s %10s %11s %7s %6s\n' "$seed" all "$s_prog" "$s_cp" "$s_crash" "$s_ref" "$s_fail" "$s_secs"
  t_prog=$((t_prog + s_prog)) t_cp=$((t_cp + s_cp)) t_crash=$((t_crash + s_crash))
  t_ref=$((t_ref + s_ref)) t_fail=$((t_fail + s_fail)) t_secs=$((t_secs + s_secs))
done
printf '%-12s %7s %7s %6s %10s %11s %7s %6s\n' total "" "$t_prog" "$t_cp" "$t_crash" "$t_ref" "$t_fail" "$t_secs"
exit $bad
