#!/bin/bash
# Device call 2 (the machine still warm: /tmp/llb kept): the 0.5B twin, 64 -> 128 -> 64 -> 128 streams on one
# server with --cache-ram 0 (the baseline, again on this machine), then with -sps 0, then with --kv-unified.
# A lenient SLO (30 s) so that every run measures the same four points, no bisection.
set -u
t0=$(date +%s); G=$PWD/.gpucap
[ -d /tmp/site/pydantic ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $G/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$G/src PYTHONUNBUFFERED=1 SERVEPACK_RESULTS_DIR=/tmp/sp-results HOME=${HOME:-/root} \
  SERVEPACK_CACHE_DIR=/tmp/sp-cache
if [ ! -x /tmp/llb/out/bin/llama-server ]; then echo "cold machine: rebuilding"; BUILD_LIMIT_S=300 bash $G/scripts/build.sh > $OUT/build2_log.txt 2>&1 || exit 1; fi
mkdir -p /tmp/twin
[ -f /tmp/twin/q05.gguf ] || python3 -m servepack.cli.main twin $G/qwen05b-header.gguf /tmp/twin/q05.gguf --seed 32 2>&1 | tail -1
uptime
for run in cram0:gpu512-cram0 sps0:gpu512-cram0-sps0 kvu:gpu512-cram0-kvu; do
  left=$(( ${TOTAL_S:-570} - ($(date +%s) - t0) )); echo "${run%%:*} gets up to $left s"
  [ $left -gt 50 ] || break
  bash $G/scripts/sweep.sh ${run%%:*} ${run#*:} $(( left < 150 ? left : 150 )) /tmp/twin/q05.gguf 64 128 30s
done
uptime
