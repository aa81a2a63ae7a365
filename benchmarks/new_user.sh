#!/usr/bin/env bash
# Benchmark: the time from `git clone` to a trained model for a new user of a Slurm cluster, following only the
# README's "On your cluster" steps, on the test bed as a cluster no shipped profile knows (two partitions, GPU types
# a100 and h100, two accounts, a per-job $TMPDIR, a second interface ib0).
#
# Run as root from a checkout:  bash benchmarks/new_user.sh
# What an administrator has done beforehand is not timed: the cluster up (hvdflow testbed start), a registry serving
# hvdflow-cpu (built or taken from ~/.cache/hvdflow, as scripts/demo.sh does), a new login with two Slurm accounts,
# and the checkout served by `git daemon` on loopback (as a forge would serve it). Then, as the new user, each README step is timed as typed; the image
# pull (a transfer that depends on the site's network) is counted apart. Prints one line per step, the total and
# the steps' exit statuses; the user's tree stays in their home for a look. Figures, not assertions.
set -euo pipefail
source "$(dirname "$0")/../scripts/lib.sh"
cd "$HVDFLOW_ROOT"
[ "$(id -u)" -eq 0 ] || { log "run as root: it starts the test bed and creates the new user"; exit 2; }

apt_install_missing "${HVDFLOW_APT_PACKAGES[@]}" "${HVDFLOW_TESTBED_APT_PACKAGES[@]}"
root_venv=${HVDFLOW_CACHE:-$HOME/.cache/hvdflow}/venv-$(venv_key)
ensure_venv "$root_venv"
export PYTHONPATH="$HVDFLOW_ROOT/src"
hvdflow_root() { "$root_venv/bin/python" -m hvdflow "$@"; }

state=/var/lib/hvdflow-new-user
mkdir -p "$state/logs"
was_up=$(hvdflow_root testbed status | grep -c '": [0-9]' || true)   # daemons with a pid
hvdflow_root testbed start
slurm_conf=${HVDFLOW_TESTBED_DIR:-/var/lib/hvdflow-testbed}/etc/slurm.conf
port=$("$root_venv/bin/python" -c 'from hvdflow.testbed.registry_server import free_port; print(free_port())')
hvdflow_root registry serve --state-dir "$state/registry" --port "$port" > "$state/logs/registry.out" 2>&1 &
registry_pid=$!
git daemon --export-all --base-path="$state" --listen=127.0.0.1 --port="$((port + 1))" --reuseaddr \
  > "$state/logs/git-daemon.out" 2>&1 &
git_pid=$!
finish() {
  kill $registry_pid $git_pid 2>/dev/null; wait $registry_pid $git_pid 2>/dev/null || true
  [ "$was_up" -gt 0 ] || hvdflow_root testbed stop
}
trap finish EXIT
registry=http://127.0.0.1:$port
for _ in $(seq 100); do curl -fsS "$registry/v2/" >/dev/null 2>&1 && break; sleep 0.2; done
hvdflow_root image push hvdflow-cpu --registry "$registry" --log "$state/logs/image-build.log" --debian follow

user=hvdflow-new$(date +%s)
useradd --create-home --shell /bin/bash "$user"
home=$(getent passwd "$user" | cut -d: -f6)
SLURM_CONF=$slurm_conf sacctmgr -i add account proj-a,proj-b cluster=hvdflow-testbed >/dev/null 2>&1 || true
SLURM_CONF=$slurm_conf sacctmgr -i add user "$user" account=proj-a,proj-b defaultaccount=proj-a >/dev/null
rm -rf "$state/hvdflow.git" && git clone -q --bare "$HVDFLOW_ROOT" "$state/hvdflow.git"
chmod -R a+rX "$state"
log "new user $user; the README's steps as typed, timed (log: $home/steps.log)"

# the new user's session: a login shell's environment, the cluster's Slurm configuration, no terminal
runuser -u "$user" -- env -i HOME="$home" USER="$user" PATH=/usr/bin:/bin LANG=C.UTF-8 SLURM_CONF="$slurm_conf" \
  REPO="git://127.0.0.1:$((port + 1))/hvdflow.git" REGISTRY="$registry" bash -s <<'USER' | tee "$home/steps.tsv"
set -uo pipefail
total=0 image=0 statuses=""
step() {   # step NAME COMMAND...: run it as typed, its output in ~/steps.log; print its seconds and status
  local name=$1 start end status; shift
  start=$(date +%s.%N)
  "$@" < /dev/null >> ~/steps.log 2>&1; status=$?
  end=$(date +%s.%N)
  seconds=$(python3 -c "print(f'{$end - $start:.1f}')")
  printf '%-34s %7s s  exit %s\n' "$name" "$seconds" "$status"
  statuses+="$name=$status "
  if [ "$name" = "hvdflow image pull" ]; then image=$seconds; else total=$(python3 -c "print($total + $seconds)"); fi
}
cd ~
step "git clone" git clone -q "$REPO" hvdflow
cd hvdflow
step "venv and pip install" bash -c 'python3 -m venv ~/hvdflow-venv && ~/hvdflow-venv/bin/pip install -q -c requirements/constraints.txt .'
export PATH=~/hvdflow-venv/bin:$PATH
export HVDFLOW_REGISTRY=$REGISTRY
step "hvdflow image pull" hvdflow image pull hvdflow-cpu
step "hvdflow site new mycluster" hvdflow site new mycluster
step "hvdflow profile install" hvdflow profile install mycluster --as cluster
step "hvdflow doctor" hvdflow doctor --profile cluster
step "snakemake --profile cluster" snakemake --profile cluster
model=$(ls results/demo/ 2>/dev/null | tr '\n' ' ')
printf 'total without the image pull: %.1f s (%.1f min); the image pull: %s s\n' "$total" \
  "$(python3 -c "print($total / 60)")" "$image"
printf 'exit statuses: %s\nresults/demo: %s\n' "$statuses" "$model"
USER
