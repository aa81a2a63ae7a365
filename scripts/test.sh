#!/usr/bin/env bash
# The test suite, from nothing: Debian packages (root), a pinned venv, then pytest.
# The tests themselves create an ordinary user, start a registry on 127.0.0.1, build (or take from
# ~/.cache/hvdflow) the hvdflow-cpu image, start the test-bed Slurm cluster (nodes in network namespaces), and run
# udocker, Horovod and Snakemake as that user.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HVDFLOW_ROOT"
[ "$(id -u)" -eq 0 ] || { log "the test suite needs root: it installs packages, creates a test user and builds images"; exit 2; }
apt_install_missing "${HVDFLOW_APT_PACKAGES[@]}" "${HVDFLOW_TESTBED_APT_PACKAGES[@]}" "${HVDFLOW_TEST_APT_PACKAGES[@]}"
venv=${HVDFLOW_CACHE:-$HOME/.cache/hvdflow}/venv-test-$(venv_key)
ensure_venv "$venv" test
# Slurm clients of the suite read the test bed's own configuration, never the machine's /etc/slurm
export SLURM_CONF=${HVDFLOW_TESTBED_DIR:-/var/lib/hvdflow-testbed}/etc/slurm.conf
PYTHONPATH="$HVDFLOW_ROOT/src" exec "$venv/bin/python" -m pytest "$@"
