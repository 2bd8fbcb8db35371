#!/bin/bash
# One capacity sweep: sweep.sh NAME PRESET LIMIT_S MODEL START MAXC SLO [extra servepack flags...]
# Copies the run's records into $OUT as NAME.tar.gz and its console as NAME_log.txt (from the repo root, .gpucap/).
set -u
NAME=$1; PRESET=$2; LIMIT=$3; MODEL=$4; START=$5; MAXC=$6; SLO=$7; shift 7
G=$PWD/.gpucap
BIN=${BUILD_DIR:-/tmp/llb}/out/bin/llama-server
rm -rf /tmp/cap-$NAME
timeout -s INT $LIMIT python3 -m servepack.cli.main capacity $G/h100.toml --preset $PRESET --server-bin $BIN \
  --model-file $MODEL --slo ttft_p90=$SLO --start $START --max-concurrency $MAXC --duration ${POINT_S:-10}s \
  --requests 2048 --prompt-tokens 256 --gen-tokens 32 --out /tmp/cap-$NAME "$@" > $OUT/${NAME}_log.txt 2>&1
echo "$NAME: capacity rc=$?"
grep -E "streams: |capacity order|again \(point|what carried|state kept|knee|limit:|bandwidth|error" $OUT/${NAME}_log.txt | cut -c1-260
[ -f /tmp/cap-$NAME/server.log ] && tail -c 300000 /tmp/cap-$NAME/server.log > /tmp/cap-$NAME/server_log_tail.txt
(cd /tmp/cap-$NAME 2>/dev/null && tar czf $OUT/$NAME.tar.gz --exclude=server.log --exclude='*.svg' --exclude=report.html \
  --exclude=capacity_requests.csv --exclude=capacity_requests.jsonl . 2>/dev/null)
