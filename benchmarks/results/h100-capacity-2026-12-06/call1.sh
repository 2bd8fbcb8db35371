#!/bin/bash
# Device call 1: build, make the twin, then `servepack capacity` on ONE server (gpu512, default flags).
set -u
t0=$(date +%s); G=$PWD/.gpucap
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $G/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$G/src PYTHONUNBUFFERED=1 SERVEPACK_RESULTS_DIR=/tmp/sp-results HOME=${HOME:-/root}
BUILD_LIMIT_S=360 bash $G/scripts/build.sh > $OUT/build_log.txt 2>&1 || { tail -30 $OUT/build_log.txt; exit 1; }
tail -3 $OUT/build_log.txt
mkdir -p /tmp/twin
python3 -m servepack.cli.main twin $G/qwen05b-header.gguf /tmp/twin/q05.gguf --seed 32 2>&1 | tail -1
left=$(( 585 - ($(date +%s) - t0) )); echo "setup $(( $(date +%s) - t0 )) s; sweep gets $left s"; uptime
bash $G/scripts/sweep.sh one gpu512 $left
uptime
