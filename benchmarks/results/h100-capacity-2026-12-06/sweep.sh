#!/bin/bash
# One capacity sweep on the 0.5B shape twin: sweep.sh NAME PRESET LIMIT_S [extra servepack flags...]
# Copies the run's records into $OUT as NAME.tar.gz and its console as NAME_log.txt.
set -u
NAME=$1; PRESET=$2; LIMIT=$3; shift 3
G=$PWD/.gpucap
BIN=${BUILD_DIR:-/tmp/llb}/out/bin/llama-server
rm -rf /tmp/cap-$NAME
timeout -s INT $LIMIT python3 -m servepack.cli.main capacity $G/h100.toml --preset $PRESET --server-bin $BIN \
  --model-file /tmp/twin/q05.gguf --slo ttft_p90=5s --start 64 --max-concurrency ${MAXC:-512} --duration ${POINT_S:-12}s \
  --requests 2048 --prompt-tokens 256 --gen-tokens 32 --out /tmp/cap-$NAME "$@" > $OUT/${NAME}_log.txt 2>&1
echo "$NAME: capacity rc=$?"
grep -E "streams: |capacity order|again \(point|what carried|state kept|points at rest|fresh server for|knee|limit:" $OUT/${NAME}_log.txt | cut -c1-230
[ -f /tmp/cap-$NAME/server.log ] && tail -c 400000 /tmp/cap-$NAME/server.log > /tmp/cap-$NAME/server_log_tail.txt
(cd /tmp/cap-$NAME && tar czf $OUT/$NAME.tar.gz --exclude=server.log --exclude='*.svg' --exclude=report.html \
  --exclude=capacity_requests.csv --exclude=capacity_requests.jsonl . 2>/dev/null)
