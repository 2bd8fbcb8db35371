#!/bin/bash
# Device call 2 (the machine still warm, /tmp/llb and /tmp/twin kept): the same sweep with a fresh server for every
# point, then on one server with llama.cpp's host prompt cache off (--cache-ram 0).
set -u
t0=$(date +%s); G=$PWD/.gpucap
[ -d /tmp/site/pydantic ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $G/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$G/src PYTHONUNBUFFERED=1 SERVEPACK_RESULTS_DIR=/tmp/sp-results HOME=${HOME:-/root}
if [ ! -x /tmp/llb/out/bin/llama-server ]; then echo "cold machine: rebuilding"; BUILD_LIMIT_S=300 bash $G/scripts/build.sh > $OUT/build2_log.txt 2>&1 || exit 1; fi
mkdir -p /tmp/twin
[ -f /tmp/twin/q05.gguf ] || python3 -m servepack.cli.main twin $G/qwen05b-header.gguf /tmp/twin/q05.gguf --seed 32 2>&1 | tail -1
uptime
bash $G/scripts/sweep.sh fresh gpu512 ${FRESH_S:-320} --fresh-server-per-point
left=$(( ${TOTAL_S:-450} - ($(date +%s) - t0) )); echo "cram0 gets $left s"
[ $left -gt 60 ] && bash $G/scripts/sweep.sh cram0 gpu512-cram0 $left --max-concurrency 128
uptime
