#!/usr/bin/env bash
# The GPU proof (benchmarks/gpu_check.py) on a machine with NVIDIA GPUs and no Slurm: hvdflow's PyTorch trainer
# (DDP over NCCL, or with `--distributed horovod` Horovod's NCCL operations, which scripts/gpu-horovod.sh builds
# into KIT/horovod; one rank per GPU), ResNet-50 steps and the warning signal, natively and in udocker P1 and R1, with a
# table of the figures and ratios. KIT is what scripts/gpu-kit.sh made; the Python is $HVDFLOW_GPU_PYTHON (default:
# the python3 on PATH), which must have PyTorch built for CUDA, NumPy, PyYAML, psutil and scikit-learn.
# As root it runs the proof as the ordinary user $HVDFLOW_GPU_USER (default hvdflow-gpu, created if missing), from
# a copy of the checkout and kit in that user's home, as udocker is meant to run.
#   bash scripts/gpu-check.sh KIT [RESULT.json] [gpu_check.py options]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
kit=$(cd "${1:?usage: scripts/gpu-check.sh KIT [RESULT.json] [options]}" && pwd)
result=${2:-$PWD/gpu-check.json}
shift $(( $# >= 2 ? 2 : 1 ))
python=${HVDFLOW_GPU_PYTHON:-$(command -v python3)}
if [ "$(id -u)" -eq 0 ]; then
  user=${HVDFLOW_GPU_USER:-hvdflow-gpu}
  id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
  home=$(getent passwd "$user" | cut -d: -f6)
  copy=$home/hvdflow-gpu-check
  rm -rf "$copy/checkout" "$copy/kit" && mkdir -p "$copy/checkout"
  cp -r "$here/src" "$here/benchmarks" "$here/scripts" "$copy/checkout/" && cp -r "$kit" "$copy/kit"
  chown -R "$user:" "$copy"
  status=0
  runuser -u "$user" -- env HOME="$home" HVDFLOW_GPU_PYTHON="$python" \
    bash "$copy/checkout/scripts/gpu-check.sh" "$copy/kit" "$copy/result.json" "$@" || status=$?
  [ -f "$copy/result.json" ] && cp "$copy/result.json" "$result"
  exit $status
fi
export PYTHONPATH=$kit/site
exec "$python" "$here/benchmarks/gpu_check.py" --kit "$kit" --work "$HOME/.cache/hvdflow/gpu-check" --out "$result" "$@"
