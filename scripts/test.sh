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
export PYTHONPATH="$HVDFLOW_ROOT/src"
[ $# -gt 0 ] && exec "$venv/bin/python" -m pytest "$@"

# The whole suite runs in two lanes at once: the Slurm test bed's tests (-m slurm), which spend most of their time
# waiting on Slurm's timers (time limits, KillWait, requeues), and a few heavy ones that need no Slurm
# (-m testbed_lane: the cores are free while Slurm's timers run), beside everything else. Each lane has its own pytest
# session, registry and udocker directory, its own ordinary user and folder in that user's home (conftest.py: LANE);
# image builds and venvs are made once, the other lane waiting on their lock.
cache=${HVDFLOW_CACHE:-$HOME/.cache/hvdflow}
bed_log=$cache/test-lane-testbed.log
lane() { HVDFLOW_TEST_LANE=$1 exec "$venv/bin/python" -m pytest --basetemp="/tmp/hvdflow-pytest-$1" -m "$2"; }
# the images the lanes need, built beside them one after the other in the order the test bed's lane uses them (a
# lane's fixture waits on the build lock and finds its image built; a failed build here is the fixture's to name)
log "images built beside the lanes (cached ones taken): log in $cache/test-images.log"
"$venv/bin/python" tests/lane_images.py "$cache/test-images-build.log" > "$cache/test-images.log" 2>&1 < /dev/null &
images=$!
log "lane testbed (-m \"slurm or testbed_lane\") runs beside this one; its output follows this lane's, and is in $bed_log meanwhile"
# its own ordinary user too: what one lane's tests check of the user's processes and files (/tmp included) is theirs
(export HVDFLOW_TEST_USER=${HVDFLOW_TEST_USER:-hvdflow-ci}-bed; lane testbed "slurm or testbed_lane") > "$bed_log" 2>&1 < /dev/null &
bed=$!
trap 'kill "$bed" "$images" 2>/dev/null || true' EXIT
rest=0; (lane rest "not slurm and not testbed_lane") || rest=$?
testbed=0; wait "$bed" || testbed=$?
wait "$images" || log "building the images beside the lanes failed (the fixtures built or named them): $(tail -3 "$cache/test-images.log")"
trap - EXIT
log "lane testbed, exit status $testbed:"
cat "$bed_log"
log "lanes: rest exit status $rest, testbed exit status $testbed"
[ "$rest" -eq 0 ] && [ "$testbed" -eq 0 ]
