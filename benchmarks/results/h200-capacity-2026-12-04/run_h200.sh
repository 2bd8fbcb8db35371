#!/bin/bash
# Call 2 on the H200 (within 30 s of the build, the machine still warm): servepack capacity on a shape twin of the
# embedded model (Qwen2.5-Coder-0.5B Q4_K_M header + random weights), 64 → 512 closed-loop streams, 512 slots,
# NVML on. Results (capacity.json, points, receipt, log) are copied into $OUT. Run from the repo root.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .device/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
export SERVEPACK_RESULTS_DIR=/tmp/sp-results HOME=${HOME:-/root}
BIN=${BUILD_DIR:-/tmp/llb}/out/bin/llama-server
ls -la "$BIN" || exit 1
mkdir -p /tmp/twin
[ -f /tmp/twin/qwen-twin.gguf ] || python3 -m servepack.cli.main twin .device/model/qwen2.5-coder-0.5b-header.gguf /tmp/twin/qwen-twin.gguf --seed 22 2>&1 | tail -2
nvidia-smi --query-gpu=name,memory.used,power.draw --format=csv
rm -rf /tmp/cap
timeout -s INT ${CAP_LIMIT_S:-500} python3 -m servepack.cli.main capacity .device/scripts/h200.toml --preset gpu512 \
  --server-bin "$BIN" --model-file /tmp/twin/qwen-twin.gguf --slo ${SLO:-ttft_p90=5s} --start 64 --max-concurrency 512 \
  --duration ${POINT_S:-15}s --requests 2048 --prompt-tokens 256 --gen-tokens 32 --out /tmp/cap 2>&1 | tee "$OUT/capacity_log.txt"
echo "capacity rc=${PIPESTATUS[0]}"
ls -la /tmp/cap
for f in capacity.json capacity_points.jsonl receipt.json MEASURED.md report.html; do
  [ -f /tmp/cap/$f ] && cp /tmp/cap/$f "$OUT/"
done
[ -f /tmp/cap/server.log ] && tail -300 /tmp/cap/server.log > "$OUT/server_log_tail.txt"
[ -f /tmp/cap/capacity_requests.jsonl ] && gzip -c /tmp/cap/capacity_requests.jsonl > "$OUT/capacity_requests.jsonl.gz"
ls -la "$OUT"
