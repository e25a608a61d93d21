#!/usr/bin/env bash
# Pools the create (or rollout) ratios of BenchmarkScaleVsNative logs, as
# BENCHMARKS.md reports them: per run the set's time over the mean of the
# two natives'; then the sum of the set's times over the sum of the natives'
# means, the mean of the runs' ratios with its standard error, and the same
# split by whether Nomad alone was fast (its mean under FAST seconds).
#
# usage: scripts/bench-pool.sh [-p rollout] [-f FAST] log...
set -euo pipefail
phase=create fast=50
while getopts "p:f:" o; do
  case $o in
    p) phase=$OPTARG ;;
    f) fast=$OPTARG ;;
    *) echo "usage: $0 [-p create|rollout] [-f seconds] log..." >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "usage: $0 [-p create|rollout] [-f seconds] log..." >&2; exit 2; }
for f in "$@"; do
  line=$(grep -h "bench_scale_test.go:[0-9]*: $phase: set " "$f" || true)
  [ -n "$line" ] || { echo "$f: no $phase result (the run failed, or ran no $phase)" >&2; continue; }
  echo "$line" | sed -E "s/.*$phase: set ([0-9.]+) s; native A ([0-9.]+) s, native B ([0-9.]+) s.*/$(basename "$f") \1 \2 \3/"
done | awk -v ph="$phase" -v fast="$fast" '
  function report(name, n, s, m, r, q,   mean, sd) {
    if (n == 0) return
    mean = r / n; sd = (n > 1) ? sqrt((q - n * mean * mean) / (n - 1)) : 0
    printf "%s %s: n=%d pooled %.3f mean %.3f se %.3f\n", ph, name, n, s / m, mean, sd / sqrt(n)
  }
  {
    s = $2; m = ($3 + $4) / 2; r = s / m
    printf "%s %s set %.2f A %.2f B %.2f ratio %.3f B/A %.3f\n", ph, $1, s, $3, $4, r, $4 / $3
    g = (m < fast) ? "fast" : "slow"
    n[g]++; S[g] += s; M[g] += m; R[g] += r; Q[g] += r * r
    n["all"]++; S["all"] += s; M["all"] += m; R["all"] += r; Q["all"] += r * r
  }
  END {
    report("all", n["all"], S["all"], M["all"], R["all"], Q["all"])
    report("natives under " fast " s", n["fast"], S["fast"], M["fast"], R["fast"], Q["fast"])
    report("natives at " fast " s or more", n["slow"], S["slow"], M["slow"], R["slow"], Q["slow"])
  }'
