#!/usr/bin/env bash
# Make the kit the GPU proof (scripts/gpu-check.sh, benchmarks/gpu_check.py) brings to a GPU node that may have no
# network: udocker and Horovod's Python sources (the rendezvous server hvdflow's launcher starts) under KIT/site,
# Horovod's sdist and cffi's wheels (which scripts/gpu-horovod.sh builds there with NCCL for the node's torch), the
# static proot of hvdflow's images (KIT/proot, built or taken from ~/.cache/hvdflow) and Debian's runc (KIT/runc).
# KIT/dataset is a copy of the digits as hvdflow prepared them (DATASET; default: the demo's, which
# `bash scripts/demo.sh` prepares), since preparing writes TFRecords with TensorFlow, which a GPU node's PyTorch lacks.
# Run as root on a Debian 12 machine with PyPI (scripts/lib.sh installs the packages). About 17 MB.
#   bash scripts/gpu-kit.sh KIT [DATASET]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HVDFLOW_ROOT"
kit=${1:?usage: scripts/gpu-kit.sh KIT [DATASET]}
dataset=${2:-$(getent passwd "${HVDFLOW_DEMO_USER:-hvdflow}" | cut -d: -f6)/hvdflow-demo/resources/datasets/digits}
[ -f "$dataset/index.json" ] || { log "no prepared digits at $dataset: run bash scripts/demo.sh first, or name one"; exit 1; }
HOROVOD_SDIST_SHA256=92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0  # horovod-0.28.1.tar.gz
apt_install_missing "${HVDFLOW_APT_PACKAGES[@]}" unzip
venv=${HVDFLOW_CACHE:-$HOME/.cache/hvdflow}/venv-$(venv_key)
ensure_venv "$venv"
rm -rf "$kit" && mkdir -p "$kit/site" && kit=$(cd "$kit" && pwd)
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
"$venv/bin/pip" download -q --no-deps --only-binary=:all: -c requirements/constraints.txt udocker -d "$tmp"
(cd "$kit/site" && unzip -q "$tmp"/udocker-*.whl 'udocker/*')
"$venv/bin/pip" download -q --no-deps --no-binary=:all: horovod==0.28.1 -d "$tmp"
echo "$HOROVOD_SDIST_SHA256  $tmp/horovod-0.28.1.tar.gz" | sha256sum -c --quiet
tar -xzf "$tmp/horovod-0.28.1.tar.gz" -C "$tmp"
(cd "$tmp/horovod-0.28.1" && find horovod -name '*.py' -print0 | xargs -0 cp --parents -t "$kit/site")
cp "$tmp/horovod-0.28.1.tar.gz" "$kit/"  # what scripts/gpu-horovod.sh builds with NCCL on the GPU node
# cffi, which Horovod's setup.py asks for when it builds for torch, for the node's Python (3.9 to 3.13), offline
for version in 3.9 3.10 3.11 3.12 3.13; do
  "$venv/bin/pip" download -q --no-deps --only-binary=:all: --python-version "$version" --implementation cp \
    --platform manylinux2014_x86_64 -d "$kit/wheels" cffi==1.17.1
done
"$venv/bin/pip" download -q --no-deps --only-binary=:all: -d "$kit/wheels" pycparser==2.22
PYTHONPATH=src "$venv/bin/python" - "$kit/proot" <<'PY'
import shutil, sys
from pathlib import Path
from hvdflow.images.build.proot import ensure_proot
from hvdflow.images.recipe import load_proot_build
built = ensure_proot(load_proot_build(Path("containers/proot/proot.yaml")), Path(sys.argv[1] + ".log"))
shutil.copy2(built, sys.argv[1])
PY
cp /usr/sbin/runc "$kit/runc"
cp -r "$dataset" "$kit/dataset"
chmod -R a+rX "$kit"
log "kit in $kit: $(du -sh "$kit" | cut -f1)"
