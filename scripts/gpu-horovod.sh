#!/usr/bin/env bash
# Build Horovod 0.28.1 with NCCL GPU operations for a GPU node's own PyTorch, offline, into KIT/horovod, where
# benchmarks/gpu_check.py finds it before the kit's Python-only Horovod (`--distributed horovod` then trains with
# Horovod's NCCL operations instead of DistributedDataParallel); 94 s on an H200 node with 16 cores. KIT is what
# scripts/gpu-kit.sh made: it holds Horovod's sdist, checked there against its SHA-256, and cffi's wheels.
# What the node must have: the Python of $HVDFLOW_GPU_PYTHON (default python3) with torch built for CUDA and NVIDIA's
# NCCL wheel beside it (what PyPI's torch installs) or $HOROVOD_NCCL_HOME; nvcc ($CUDA_HOME/bin, PATH or
# /usr/local/cuda/bin); CMake; a C++ compiler; make or ninja. Kernels are built for the GPUs of this node only
# (nvidia-smi's compute capabilities) unless HOROVOD_BUILD_CUDA_CC_LIST says otherwise.
#   bash scripts/gpu-horovod.sh KIT
set -euo pipefail
kit=$(cd "${1:?usage: scripts/gpu-horovod.sh KIT}" && pwd)
python=${HVDFLOW_GPU_PYTHON:-$(command -v python3)}
say() { echo "gpu-horovod: $*" >&2; }
sdist=$kit/horovod-0.28.1.tar.gz
[ -f "$sdist" ] || { say "no $sdist: make the kit again with scripts/gpu-kit.sh"; exit 1; }
nvcc=${CUDA_HOME:+$CUDA_HOME/bin/nvcc}
[ -x "${nvcc:-}" ] || nvcc=$(command -v nvcc || true)
[ -x "${nvcc:-}" ] || nvcc=/usr/local/cuda/bin/nvcc
[ -x "$nvcc" ] || { say "no nvcc (CUDA's compiler) in \$CUDA_HOME/bin, on PATH or in /usr/local/cuda/bin"; exit 1; }
cuda_home=$(cd "$(dirname "$(readlink -f "$nvcc")")/.." && pwd)
# NCCL: $HOROVOD_NCCL_HOME, else the NCCL wheel beside torch (nvidia/**/nccl.h), else the system's.
nccl_h=$(find ${HOROVOD_NCCL_HOME:-$("$python" -c 'import nvidia; print(*nvidia.__path__)' 2>/dev/null) \
  /usr/include /usr/local/cuda/include} -name nccl.h 2>/dev/null | head -1)
[ -n "$nccl_h" ] ||
  { say "no NCCL headers (nccl.h) beside $python's torch or the system's: set HOROVOD_NCCL_HOME"; exit 1; }
nccl_so=$(find "$(dirname "$nccl_h")/.." /usr/lib /usr/local/cuda/lib64 -name 'libnccl.so*' 2>/dev/null | head -1)
[ -n "$nccl_so" ] || { say "no libnccl.so beside $nccl_h: set HOROVOD_NCCL_HOME"; exit 1; }
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT
# The wheel ships libnccl.so.2 only; Horovod's CMake links the unversioned name (the same library torch loads).
mkdir -p "$work/nccl/lib" && ln -s "$(readlink -f "$nccl_so")" "$work/nccl/lib/libnccl.so"
tar -xzf "$sdist" -C "$work"
src=$work/horovod-0.28.1
# C++17 for torch >= 2.1's headers: the two lines of containers/hvdflow-torch-cpu/horovod-cxx17.patch (no `patch`)
cmake_files=("$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt")
sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "${cmake_files[@]}"
[ "$(cat "${cmake_files[@]}" | grep -c '^ *set(CMAKE_CXX_STANDARD 17)')" -eq 2 ] ||
  { say "Horovod's CMake files are not the 0.28.1 this script knows (no C++14 lines to raise)"; exit 1; }
cuda_major=$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
if [ "${cuda_major:-0}" -ge 13 ]; then  # C++17 kernels from CUDA 13 on (its CCCL needs 17; 11 was not tried)
  sed -i 's/set(CMAKE_CUDA_STANDARD 11)/set(CMAKE_CUDA_STANDARD 17)/' "$src/horovod/common/ops/cuda/CMakeLists.txt"
fi
if [ -z "${HOROVOD_BUILD_CUDA_CC_LIST:-}" ] && command -v nvidia-smi >/dev/null; then
  HOROVOD_BUILD_CUDA_CC_LIST=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | tr -d . | sort -u |
    paste -sd,)
fi
command -v make >/dev/null || export CMAKE_GENERATOR=Ninja
# CMAKE_POLICY_VERSION_MINIMUM below: CMake 4 refuses the bundled gloo's cmake_minimum_required(2.8.12) without it.
# CXXFLAGS below: the three headers Horovod's bundled gloo and flatbuffers use without including them (GCC >= 13), as
# in the hvdflow-torch images' recipes.
say "torch $("$python" -c 'import torch; print(torch.__version__)'), nvcc $("$nvcc" --version | tail -2 | head -1),"\
" NCCL $nccl_h, kernels for ${HOROVOD_BUILD_CUDA_CC_LIST:-every architecture nvcc knows}"
# Horovod's setup.py asks for cffi (setup_requires) when it builds for torch: the kit's wheels, offline.
"$python" -m pip install -q --no-index --find-links "$kit/wheels" --target "$work/build-deps" cffi
begun=$(date +%s)
rm -rf "$kit/horovod"
PYTHONPATH="$work/build-deps${PYTHONPATH:+:$PYTHONPATH}" \
  env HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITH_GLOO=1 \
  HOROVOD_WITHOUT_MPI=1 HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_CUDA_HOME="$cuda_home" HOROVOD_NCCL_LINK=SHARED \
  HOROVOD_NCCL_INCLUDE="$(dirname "$nccl_h")" HOROVOD_NCCL_LIB="$work/nccl/lib" \
  ${HOROVOD_BUILD_CUDA_CC_LIST:+HOROVOD_BUILD_CUDA_CC_LIST=$HOROVOD_BUILD_CUDA_CC_LIST} \
  CMAKE_POLICY_VERSION_MINIMUM=3.5 MAKEFLAGS="-j$(nproc)" \
  CXXFLAGS="${CXXFLAGS:-} -include string -include stdexcept -include cstdint" \
  "$python" -m pip install --no-deps --no-build-isolation --no-index --target "$kit/horovod" "$src"
"$python" - "$kit/horovod" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import horovod
import horovod.torch as hvd
if not hvd.nccl_built():
    sys.exit("gpu-horovod: the Horovod built has no NCCL operations")
print(f"gpu-horovod: horovod.torch {horovod.__version__}: NCCL built ({hvd.nccl_built()}), Gloo {hvd.gloo_built()}",
      file=sys.stderr)
PY
chmod -R a+rX "$kit/horovod"
say "built into $kit/horovod in $(( $(date +%s) - begun )) s"
