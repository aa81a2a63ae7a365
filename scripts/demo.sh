#!/usr/bin/env bash
# The main job: the demo pipeline on the embedded default (`snakemake --profile profiles/local`).
# As root on a fresh Debian 12 machine it does everything: installs the Debian packages, builds the hvdflow-cpu
# image offline (cached in ~/.cache/hvdflow), serves it from a registry on 127.0.0.1, creates the ordinary user
# $HVDFLOW_DEMO_USER (default: hvdflow) and, as that user, runs the pipeline (pull and verify the image with udocker,
# prepare the digits into sharded TFRecords, train with 2 Horovod ranks, evaluate, plot) and writes the HTML report.
# Results land in ~$HVDFLOW_DEMO_USER/hvdflow-demo. As an ordinary user (an HPC login node) it runs only the user
# part, against $HVDFLOW_REGISTRY.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HVDFLOW_ROOT"
TREE_PARTS=(src containers requirements scripts pyproject.toml workflow config profiles examples docs mkdocs.yml .git)

user_part() {
  local venv rerun=()
  venv=${HVDFLOW_CACHE:-$HOME/.cache/hvdflow}/venv-$(venv_key)
  ensure_venv "$venv"
  export PATH="$venv/bin:$PATH"
  if [ -n "${HVDFLOW_DEMO_PUSHED:-}" ] && [ -f containers/images.lock.yaml ]; then
    # the root part has just built and pushed hvdflow-cpu; the build is reproducible, but where Debian's mirror has
    # moved on since the recipe's Debian manifest (or the recipe changed) it gives a new digest, so the lock of an
    # earlier demo may pin another one: say both digests and accept the new image explicitly. Run by hand (an
    # ordinary user's registry), a moved digest stays an error.
    if ! out=$(PYTHONPATH=src python -m hvdflow image pull hvdflow-cpu 2>&1 >/dev/null); then
      grep -q "the image changed in the registry" <<<"$out" || { echo "$out" >&2; exit 1; }
      log "$out"
      log "this run built and pushed hvdflow-cpu itself: accepting its digest (hvdflow image update hvdflow-cpu)"
      PYTHONPATH=src python -m hvdflow image update hvdflow-cpu >/dev/null
      rerun=(--forcerun pull_image)  # the jobs after the pull run again, in the new image
    fi
  fi
  log "running the pipeline as $(id -un): snakemake --profile profiles/local ${rerun[*]:-}"
  snakemake --profile profiles/local "${rerun[@]}"
  snakemake --profile profiles/local --report results/report.html
  log "test accuracy: $(python -c 'import json; print(json.load(open("results/demo/evaluation.json"))["accuracy"])')"
  log "report: $HVDFLOW_ROOT/results/report.html; run record: $HVDFLOW_ROOT/results/demo/run.json"
  log "the README's commands, as $(id -un): cd $HVDFLOW_ROOT && source $venv/bin/activate"
  log "  then, for example: hvdflow rerun results/demo/run.json; snakemake --profile profiles/local benchmark"
}

if [ "$(id -u)" -ne 0 ]; then
  [ -n "${HVDFLOW_REGISTRY:-}" ] || { log "set HVDFLOW_REGISTRY to the registry that serves hvdflow's images"; exit 2; }
  user_part
  exit 0
fi

demo_user=${HVDFLOW_DEMO_USER:-hvdflow}
apt_install_missing "${HVDFLOW_APT_PACKAGES[@]}"
root_venv=${HVDFLOW_CACHE:-$HOME/.cache/hvdflow}/venv-$(venv_key)
ensure_venv "$root_venv"
export PYTHONPATH="$HVDFLOW_ROOT/src"

state=/var/lib/hvdflow-demo
mkdir -p "$state/logs"
port=$("$root_venv/bin/python" -c 'from hvdflow.testbed.registry_server import free_port; print(free_port())')
"$root_venv/bin/python" -m hvdflow registry serve --state-dir "$state/registry" --port "$port" > "$state/logs/registry.out" 2>&1 &
registry_pid=$!
trap 'kill $registry_pid 2>/dev/null; wait $registry_pid 2>/dev/null || true' EXIT
registry=http://127.0.0.1:$port
for _ in $(seq 100); do curl -fsS "$registry/v2/" >/dev/null 2>&1 && break; sleep 0.2; done
log "registry serving at $registry"
log "building (or taking from the cache) and pushing hvdflow-cpu; build log: $state/logs/image-build.log"
# --debian follow: where Debian's mirror no longer serves a version the recipe pins, take its version (the build log
# names them) rather than fail; the image then has another digest, which the user part accepts, saying both
"$root_venv/bin/python" -m hvdflow image push hvdflow-cpu --registry "$registry" --log "$state/logs/image-build.log" \
  --debian follow

id "$demo_user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$demo_user"
home=$(getent passwd "$demo_user" | cut -d: -f6)
tree=$home/hvdflow-demo
log "copying the tree to $tree for $demo_user"
mkdir -p "$tree"
copy_tree_keeping_lock "$tree" "${TREE_PARTS[@]}"
chown -R "$demo_user:" "$tree"
runuser -u "$demo_user" -- env -i HOME="$home" USER="$demo_user" PATH=/usr/bin:/bin LANG=C.UTF-8 \
  HVDFLOW_REGISTRY="$registry" HVDFLOW_DEMO_PUSHED=1 bash -c "cd '$tree' && bash scripts/demo.sh"
