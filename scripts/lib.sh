# Shared shell functions of hvdflow's setup scripts (sourced, not run).
# Everything here is idempotent: a second run checks and does nothing.

HVDFLOW_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HVDFLOW_PYTHON=/usr/bin/python3   # Debian's interpreter: venvs made from it are usable by every user

# Debian packages: udocker's engines, the registry and skopeo, image building (uidmap: without root, in a user
# namespace), Open MPI, Horovod's build tools (patch: our patches to its sources).
HVDFLOW_APT_PACKAGES=(
  python3 python3-venv python3-dev python3-pip ca-certificates curl binutils file git procps
  proot runc docker-registry skopeo mmdebstrap uidmap busybox-static
  openmpi-bin libopenmpi-dev g++ make cmake libtalloc-dev pkg-config patch
)

# The test bed's Slurm cluster (hvdflow testbed): munge, the Slurm daemons and client, slurmdbd with MariaDB.
HVDFLOW_TESTBED_APT_PACKAGES=(
  munge slurmctld slurmd slurm-client slurmdbd mariadb-server iproute2 util-linux
)

# The tests' own tools: a FUSE filesystem that refuses flock (tests/fuse/noflock.c) is built against libfuse3.
HVDFLOW_TEST_APT_PACKAGES=(libfuse3-dev fuse3)

log() { printf '[hvdflow %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# Install the missing Debian packages (root only). Package scripts must not start services: a temporary
# policy-rc.d (exit 101) stops docker-registry's postinst from starting a system-wide registry.
apt_install_missing() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || { log "missing Debian packages: ${missing[*]} (ask your admin, or run as root)"; return 1; }
  log "apt-get install ${missing[*]}"
  local policy=${HVDFLOW_POLICY_RC_D:-/usr/sbin/policy-rc.d}   # the path is settable for the tests only
  [ -e $policy ] && { _apt_install "${missing[@]}"; return; }
  # the subshell's EXIT trap removes our policy-rc.d whether the install succeeds, fails or is interrupted
  (
    trap 'rm -f '"$policy" EXIT
    printf '#!/bin/sh\nexit 101\n' > $policy && chmod +x $policy
    _apt_install "${missing[@]}"
  )
}

_apt_install() {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# The key of a venv: the interpreter, the pinned constraints and the dependency lists.
venv_key() {
  cat "$HVDFLOW_ROOT/requirements/constraints.txt" "$HVDFLOW_ROOT/pyproject.toml" <($HVDFLOW_PYTHON -V 2>&1) \
    | sha256sum | cut -c1-16
}

# The dependencies (and test extras) of pyproject.toml, one per line.
project_requirements() {
  $HVDFLOW_PYTHON - "$HVDFLOW_ROOT/pyproject.toml" "$@" <<'PY'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
print("\n".join(project["dependencies"] + [r for extra in sys.argv[2:] for r in project["optional-dependencies"][extra]]))
PY
}

# ensure_venv DIR [EXTRA...]: a venv from Debian's python3 with hvdflow's pinned dependencies, and the `hvdflow`
# command of the checkout it is run in (write_checkout_command). Built once per key (checkouts with the same pins
# share it); a half-built venv is rebuilt.
ensure_venv() {
  local dir=$1; shift
  if [ -f "$dir/.hvdflow-complete" ]; then write_checkout_command "$dir"; return 0; fi
  mkdir -p "$(dirname "$dir")"
  # one maker at a time (the test suite's lanes start together); the others wait, then find it made
  ( flock 9
    [ -f "$dir/.hvdflow-complete" ] && exit 0
    rm -rf "$dir"
    log "creating venv $dir"
    $HVDFLOW_PYTHON -m venv "$dir"
    "$dir/bin/pip" install -c "$HVDFLOW_ROOT/requirements/constraints.txt" -r <(project_requirements "$@") \
      > "$dir.log" 2>&1 || { tail -20 "$dir.log" >&2; log "pip install into $dir failed (log: $dir.log)"; exit 1; }
    touch "$dir/.hvdflow-complete"
  ) 9>"$dir.lock" || return 1
  write_checkout_command "$dir"
}

# write_checkout_command VENV: VENV/bin/hvdflow runs hvdflow from the checkout it is typed in (the nearest folder at
# or above the working directory with src/hvdflow/cli.py and workflow/Snakefile), so that the command, the rules and
# the job steps, which import that checkout's src/, are one code; the venv is shared by checkouts with the same pins.
write_checkout_command() {
  local venv=$1 tmp
  tmp=$(mktemp "$venv/bin/.hvdflow.XXXXXX")
  cat > "$tmp" <<EOF
#!/bin/sh
# hvdflow from the checkout at or above the working directory (written by scripts/lib.sh, write_checkout_command)
dir=\$PWD
while [ ! -f "\$dir/src/hvdflow/cli.py" ] || [ ! -f "\$dir/workflow/Snakefile" ]; do
  if [ "\$dir" = / ]; then
    echo "hvdflow: no hvdflow checkout at or above \$PWD (a folder with src/hvdflow/cli.py and workflow/Snakefile): cd into your clone" >&2
    exit 2
  fi
  dir=\$(dirname "\$dir")
done
PYTHONPATH="\$dir/src\${PYTHONPATH:+:\$PYTHONPATH}" exec "$venv/bin/python" -m hvdflow "\$@"
EOF
  chmod 755 "$tmp"
  mv -f "$tmp" "$venv/bin/hvdflow"
}

# copy_tree_keeping_lock DEST PART...: replace each PART (a path of the working directory) in DEST with a fresh copy,
# keeping DEST's containers/images.lock.yaml: the lock the first pull wrote pins the digest the runs there used; it is
# the user's record and survives the copy.
copy_tree_keeping_lock() {
  local dest=$1 part kept lock=containers/images.lock.yaml
  shift
  kept=$(mktemp)
  if [ -f "$dest/$lock" ]; then cp -p "$dest/$lock" "$kept"; else rm -f "$kept"; fi
  for part in "$@"; do rm -rf "${dest:?}/$part"; if [ -e "$part" ]; then cp -r "$part" "$dest/$part"; fi; done
  if [ -f "$kept" ]; then mv "$kept" "$dest/$lock"; fi
}
