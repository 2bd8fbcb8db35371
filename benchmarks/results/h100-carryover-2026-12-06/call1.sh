#!/bin/bash
# Device call 1: the 32B-shaped twin written (and hashed into servepack's cache) while llama-server builds, then
# `servepack capacity` on it, one server, from 16 streams up.
set -u
t0=$(date +%s); G=$PWD/.gpucap
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $G/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$G/src PYTHONUNBUFFERED=1 SERVEPACK_RESULTS_DIR=/tmp/sp-results HOME=${HOME:-/root} \
  SERVEPACK_CACHE_DIR=/tmp/sp-cache
python3 --version; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; df -h /tmp | tail -1
mkdir -p /tmp/twin
( python3 -m servepack.cli.main twin $G/q32b-header.gguf /tmp/twin/q32b.gguf --seed 32 2>&1 | tail -1
  echo "twin done at $(( $(date +%s) - t0 )) s"
  python3 -c "from pathlib import Path; from servepack.weights.hashcache import HashCache
print('sha256', HashCache.under(Path('/tmp/sp-cache')).sha256(Path('/tmp/twin/q32b.gguf'))[:12])"
  echo "hashed at $(( $(date +%s) - t0 )) s" ) > $OUT/twin32_log.txt 2>&1 &
tw=$!
BUILD_LIMIT_S=360 bash $G/scripts/build.sh > $OUT/build_log.txt 2>&1 || { tail -30 $OUT/build_log.txt; exit 1; }
tail -3 $OUT/build_log.txt
echo "build done at $(( $(date +%s) - t0 )) s"
wait $tw; cat $OUT/twin32_log.txt
[ -f /tmp/twin/q32b.gguf.twin.json ] || exit 1
left=$(( 580 - ($(date +%s) - t0) )); echo "sweep gets $left s"; uptime
POINT_S=${POINT_S:-8} bash $G/scripts/sweep.sh q32b gpu32b $left /tmp/twin/q32b.gguf 16 128 5s
uptime
