#!/bin/bash
# Device call 3: the 32B-shaped twin swept again with a fresh server per point (`--fresh-server-per-point`), as
# call1.sh's order-dependent sweep asked. Build + twin + sweep do not fit one call's 580 s, so two calls on the same
# warm machine (/tmp/llb, /tmp/twin and /tmp/sp-cache kept while it stays warm):
#   bash call3.sh build   llama-server built while the twin is written and hashed into servepack's cache (call1.sh)
#   bash call3.sh sweep   capacity --preset gpu32b --fresh-server-per-point, from 16 streams up (TOTAL_S: its limit)
#   bash call3.sh         both, in one call
set -u
t0=$(date +%s); G=$PWD/.gpucap; PHASE=${1:-all}
[ -d /tmp/site/pydantic ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $G/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$G/src PYTHONUNBUFFERED=1 SERVEPACK_RESULTS_DIR=/tmp/sp-results HOME=${HOME:-/root} \
  SERVEPACK_CACHE_DIR=/tmp/sp-cache
if [ "$PHASE" != sweep ]; then
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
fi
if [ "$PHASE" != build ]; then
  [ -x /tmp/llb/out/bin/llama-server ] && [ -f /tmp/twin/q32b.gguf.twin.json ] || { echo "cold machine: no build or no twin"; exit 2; }
  left=$(( ${TOTAL_S:-580} - ($(date +%s) - t0) )); echo "sweep gets $left s"; uptime; free -g | head -2
  POINT_S=${POINT_S:-8} bash $G/scripts/sweep.sh q32bf gpu32b $left /tmp/twin/q32b.gguf 16 128 5s --fresh-server-per-point
  grep -E "fresh server|observer|pin match" $OUT/q32bf_log.txt | cut -c1-260
  uptime
fi
echo "call3 $PHASE done at $(( $(date +%s) - t0 )) s"
