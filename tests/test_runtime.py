"""The runtime seam: every runtime the factory builds satisfies the Runtime protocol, and only the runtime package
knows which runtimes exist."""

from __future__ import annotations

import ast
import json
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import REPO
from hvdflow.errors import ConfigError, ImageError, UdockerError
from hvdflow.images.execmode_choice import MODE_ENV, REFUSED, chooser_argv
from hvdflow.images.runc_probe import RuncProbe
from hvdflow.runtime import (
    ImageStore,
    Runtime,
    RuntimeSettings,
    as_kind,
    expose_gpus,
    image_store,
    make_runtime,
    runtime_settings,
    section_schema,
)
from hvdflow.runtime.record import ContainerRecord, container_in_mode
from hvdflow.runtime.registry import KINDS
from hvdflow.runtime.udocker.runtime import LAST_EXIT
from hvdflow_wire import WireError
from hvdflow_wire.task import NvidiaSetup
from hvdflow_wire.values import from_json, to_json

RUNTIME_PACKAGE = REPO / "src" / "hvdflow" / "runtime"
CATALOG = REPO / "containers" / "catalog.yaml"


def _settings(tmp_path: Path, kind: str = "udocker", proot: str = "host") -> RuntimeSettings:
    """A profile's runtime section for ``kind`` as the profile loader checks it: udocker's with ``proot``, native's
    with its venvs under ``tmp_path``; udocker may run as root here."""
    own = {"proot": proot} if kind == "udocker" else {"venv_dir": str(tmp_path / "native")}
    section = {"kind": kind, "udocker_dir": str(tmp_path / "udocker"), **own}
    return replace(runtime_settings("profile: runtime", section, "gloo"), allow_root=True)


def _record(udocker_dir: Path) -> ContainerRecord:
    return ContainerRecord(image="hvdflow-cpu", reference="hvdflow/cpu:1", registry="http://127.0.0.1:5999",
                           digest="sha256:" + "0" * 64, container="c1", execmode="P1", udocker_dir=str(udocker_dir),
                           created=time.time())


@pytest.fixture
def runtimes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Runtime]:
    """Each runtime the factory knows, built by it: udocker with the host's proot (no image needed), native with
    this interpreter standing in for the image's venv (its creation needs the image's wheels)."""
    import hvdflow.runtime.native.venv as native_venv

    monkeypatch.setattr(native_venv, "native_python", lambda venv_dir, image, catalog: Path(sys.executable))
    settings = _settings(tmp_path)
    record = _record(tmp_path / "udocker")
    return {kind: make_runtime(as_kind(settings, kind, "gloo"), record, CATALOG) for kind in KINDS}


def test_the_factory_builds_every_runtime_a_profile_may_name() -> None:
    assert tuple(KINDS) == ("udocker", "native")
    assert section_schema()["properties"]["kind"]["enum"] == list(KINDS)


@pytest.mark.parametrize("kind", ["udocker", "native"])
def test_every_runtime_the_factory_builds_satisfies_the_protocol(runtimes: dict[str, Runtime], kind: str,
                                                                 tmp_path: Path) -> None:
    runtime = runtimes[kind]
    assert isinstance(runtime, Runtime)
    assert runtime.name == kind
    argv = runtime.command(["python3", "-c", "import os; print(os.environ['HVDFLOW_PROBE'])"], {"HVDFLOW_PROBE": "x"},
                           [tmp_path])
    assert all(isinstance(a, str) for a in argv) and argv[-2:] == ["-c", "import os; print(os.environ['HVDFLOW_PROBE'])"]
    env = runtime.process_env()
    assert "PATH" in env
    setup = runtime.gpu_setup()
    assert setup is None or from_json(NvidiaSetup, to_json(setup), "gpu_setup") == setup   # a value of the task file
    assert runtime.engine() and all(isinstance(v, str) for v in runtime.engine().values())


@pytest.mark.parametrize("kind", ["udocker", "native"])
def test_every_runtimes_image_store_satisfies_the_protocol(kind: str, tmp_path: Path) -> None:
    store = image_store(kind, tmp_path / "store", allow_root=True)
    assert isinstance(store, ImageStore)
    assert store.location == tmp_path / "store" and store.checks_dir.is_relative_to(store.location)
    (tmp_path / "store" / "layers").mkdir(parents=True)
    (tmp_path / "store" / "layers" / "sha256:ab").write_bytes(b"\0" * 3 * 2 ** 20)
    assert store.progress() == "3.0 MiB in udocker's layers"
    with pytest.raises(ConfigError, match="runtime: 'docker' is not one of udocker, native"):
        image_store("docker", tmp_path)
    if os.geteuid() == 0:  # udocker refuses root unless told (the suite's root has HVDFLOW_ALLOW_ROOT unset here)
        with pytest.raises(UdockerError, match="root"):
            image_store(kind, tmp_path / "store", allow_root=False)


def test_the_native_runtime_runs_a_command_for_real(runtimes: dict[str, Runtime], tmp_path: Path) -> None:
    runtime = runtimes["native"]
    code = "import os, hvdflow_index, hvdflow_runstate; print(os.environ['HVDFLOW_PROBE'], os.getcwd())"
    proc = subprocess.run(runtime.command(["python3", "-c", code], {"HVDFLOW_PROBE": "seen"}, [tmp_path]),
                          env=runtime.process_env(), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["seen", str(tmp_path)]


def test_the_udocker_runtime_runs_in_its_container_with_the_chosen_proot(runtimes: dict[str, Runtime],
                                                                         tmp_path: Path) -> None:
    runtime = runtimes["udocker"]
    argv = runtime.command(["python3", "-V"], {"HOROVOD_RANK": "0"}, [tmp_path])
    assert argv[argv.index("run"):][-8:] == ["c1", *LAST_EXIT, "python3", "-V"]
    assert "--env=HOROVOD_RANK=0" in argv and str(tmp_path) in argv
    assert (tmp_path / "udocker" / "containers" / "c1" / "ROOT" / str(tmp_path).lstrip("/")).is_dir()
    assert runtime.process_env()["UDOCKER_DIR"] == str(tmp_path / "udocker")
    assert runtime.gpu_setup() == NvidiaSetup(str(tmp_path / "udocker"), ["c1"])
    assert runtime.engine() == {"proot": "/usr/bin/proot"}


def test_the_gpu_setup_is_skipped_where_no_driver_exists(runtimes: dict[str, Runtime], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import hvdflow.runtime.udocker.runtime as udocker_runtime

    monkeypatch.setattr(udocker_runtime, "NVIDIA_DRIVER", tmp_path / "no-driver")
    setup = runtimes["udocker"].gpu_setup()
    assert setup is not None and expose_gpus(setup).endswith(": udocker setup --nvidia skipped")


def test_a_gpu_setup_that_udocker_leaves_undone_is_named(runtimes: dict[str, Runtime], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # udocker setup --nvidia exits 0 where it finds no driver libraries or no library folder in the container (as on
    # a GPU node with the node's software in a bare root: the GPU proof's first run on an H200), and runc's ranks then
    # ran without the GPU's device files; here the node has a driver version line but no NVIDIA libraries
    import hvdflow.runtime.udocker.runtime as udocker_runtime

    driver = tmp_path / "version"
    driver.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n")
    monkeypatch.setattr(udocker_runtime, "NVIDIA_DRIVER", driver)
    monkeypatch.setenv("HVDFLOW_ALLOW_ROOT", "1")
    runtime = runtimes["udocker"]
    runtime.command(["python3", "-V"], {}, [])  # the container's root, as a launch makes it
    setup = runtime.gpu_setup()
    assert setup is not None
    with pytest.raises(UdockerError, match=r"udocker setup --nvidia did not set up container c1 for the GPUs of "
                                           r".*\(its exit status is 0 all the same\)"):
        expose_gpus(setup)
    assert not list((tmp_path / "udocker" / ".hvdflow" / "nvidia").glob("*.done"))  # tried again at the next start


def test_an_image_record_is_read_back_checked_and_a_malformed_one_named(tmp_path: Path) -> None:
    record = _record(tmp_path / "udocker")
    (tmp_path / "image.json").write_text(record.to_json())
    assert ContainerRecord.read(tmp_path / "image.json") == record
    older = {k: v for k, v in json.loads(record.to_json()).items() if k != "runc_container"}
    (tmp_path / "older.json").write_text(json.dumps(older))  # from before execmode auto: no R1 container
    assert ContainerRecord.read(tmp_path / "older.json") == record
    (tmp_path / "bad.json").write_text(json.dumps({**older, "created": "yesterday"}))
    with pytest.raises(WireError, match=r"bad\.json: created is str, expected float$"):
        ContainerRecord.read(tmp_path / "bad.json")


def test_each_kind_brings_its_own_checks_of_the_host_for_doctor(tmp_path: Path) -> None:
    from hvdflow.runtime import host_checks

    udocker = host_checks(_settings(tmp_path))
    assert [f.check for f in udocker] == ["udocker directory", "seccomp", "proot"]
    assert udocker[0].status != "failure" and "will be made" in udocker[0].detail  # a warning: under 10 GiB free
    assert host_checks(_settings(tmp_path, "native")) == []  # the venv needs no engine of its own


def test_an_unknown_runtime_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="runtime: 'docker' is not one of udocker, native"):
        make_runtime(replace(_settings(tmp_path), kind="docker"), _record(tmp_path))


def test_no_module_outside_the_runtime_package_imports_a_runtime_of_its_own() -> None:
    # a kind's folder (udocker/, native/) is reached through the door (hvdflow.runtime) and the registry only
    concrete = {".".join(("hvdflow", *p.relative_to(RUNTIME_PACKAGE.parent).with_suffix("").parts)).removesuffix(".__init__")
                for p in RUNTIME_PACKAGE.glob("*/*.py")}
    offenders = []
    for path in sorted((REPO / "src" / "hvdflow").rglob("*.py")):
        if RUNTIME_PACKAGE in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(REPO)}: {n}" for n in names if n in concrete]
    assert not offenders


def test_only_the_runtime_package_gets_images_from_udocker() -> None:
    """The pull step, ``hvdflow image``, doctor and rerun reach images through the runtime's ImageStore only: no
    module outside ``images/`` and the runtime package makes a Udocker or calls udocker's image functions."""
    doors = {"Udocker", "pull_image", "load_image", "loaded_image", "ensure_container", "pinned_container"}
    offenders = []
    for path in sorted((REPO / "src" / "hvdflow").rglob("*.py")):
        if RUNTIME_PACKAGE in path.parents or REPO / "src" / "hvdflow" / "images" in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                offenders += [f"{path.relative_to(REPO)}: {a.name}" for a in node.names if a.name in doors]
    assert not offenders


def test_the_record_names_udockers_proot_and_no_engine_for_a_native_run(tmp_path: Path) -> None:
    from hvdflow.runtime import recorded_engine

    image = {"udocker_dir": str(tmp_path), "container": "c1"}
    assert recorded_engine(_settings(tmp_path, "native"), image) is None
    host = recorded_engine(_settings(tmp_path), image)
    assert host is not None and host["choice"] == "host" and host["binary"] == "/usr/bin/proot" and len(host["sha256"]) == 64
    carried = recorded_engine(_settings(tmp_path, proot="image"), image)
    assert carried is not None and carried["binary"] is None and "carries no proot" in carried["note"]


LEAVES_A_CHILD = ("import subprocess, sys; p = subprocess.Popen(['sleep', '{sleep}']); "
                  "open(sys.argv[1], 'w').write(str(p.pid)); sys.exit({code})")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_proot_reports_the_last_process_to_exit_and_last_exit_makes_it_the_commands_status(tmp_path: Path) -> None:
    """The cause of a rank's 75 seen as 0 (CI, at 634d6f9), under Debian's proot, and the wrapper that fixes it."""
    src = str(REPO / "src")
    child = LEAVES_A_CHILD.format(sleep=1, code=75)
    plain = subprocess.run(["proot", "-r", "/", sys.executable, "-c", child, str(tmp_path / "pid")],
                           capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr   # the child's sleep exited last: proot says 0, not 75
    wrapped = subprocess.run(["proot", "-r", "/", sys.executable, "-S", "-m", "hvdflow_trainer.last_exit", "--",
                              sys.executable, "-c", child, str(tmp_path / "pid")],
                             capture_output=True, text=True, timeout=120, env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"})
    assert wrapped.returncode == 75, wrapped.stderr
    assert not _alive(int((tmp_path / "pid").read_text()))


@pytest.mark.parametrize("code, status", [("sys.exit(3)", 3), ("os.kill(os.getpid(), signal.SIGKILL)", 137),
                                          ("os.kill(os.getpid(), signal.SIGSEGV)", 139)])
def test_last_exit_returns_the_commands_status_and_ends_what_it_left_running(tmp_path: Path, code: str,
                                                                            status: int) -> None:
    child = ("import os, signal, subprocess, sys; p = subprocess.Popen(['sleep', '60']); "
             f"open(sys.argv[1], 'w').write(str(p.pid)); {code}")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-S", "-m", "hvdflow_trainer.last_exit", "--", sys.executable, "-c", child,
                           str(tmp_path / "pid")], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == status, proc.stderr
    assert not _alive(int((tmp_path / "pid").read_text()))   # the orphaned sleep was ended, not left running
    assert time.monotonic() - started < 50   # it did not wait for the sleep's 60 s


def test_last_exit_names_a_command_it_cannot_start() -> None:
    proc = subprocess.run([sys.executable, "-S", "-m", "hvdflow_trainer.last_exit", "--", "/nonexistent/python3"],
                          capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(REPO / "src")})
    assert proc.returncode == 127 and "cannot start /nonexistent/python3" in proc.stderr


WAITS_FOR_A_SIGNAL = """
import os, signal, sys, time
def stop(signum, frame):
    open(sys.argv[1] + ".got", "w").write(signal.Signals(signum).name)
    sys.exit(3)
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
    signal.signal(sig, stop)
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(600)
"""


def _signal_state(pid: int) -> str:
    """A process's signal masks from /proc (pending, blocked, ignored, caught), or why they cannot be read."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as exc:
        return f"{pid}: {exc.strerror}"
    return f"{pid}: " + " ".join(line.replace("\t", "") for line in lines if line.startswith(("Sig", "Shd", "NSpid")))


def _exit_status_or_state(parent: subprocess.Popen[str], init: int, command: int, got: Path) -> int | str:
    """The parent's exit status within 60 s; else what the processes' signal state was (they are then killed)."""
    try:
        return parent.wait(60)
    except subprocess.TimeoutExpired:
        state = (f"no exit in 60 s; {got.name} {'written' if got.exists() else 'absent'}; init "
                 f"{_signal_state(init)}; command {_signal_state(command)}")
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait(30)
        return state


def _init_of_new_pid_namespace(tmp_path: Path) -> tuple[subprocess.Popen[str], int]:
    """last_exit as PID 1 of a new pid namespace (as udocker's R1 runs it under runc), the command waiting for a
    signal; the parent (unshare, as runc) and the host pid of the init."""
    parent = subprocess.Popen(["unshare", "--user", "--map-root-user", "--pid", "--fork", sys.executable, "-S", "-m",
                               "hvdflow_trainer.last_exit", "--", sys.executable, "-c", WAITS_FOR_A_SIGNAL,
                               str(tmp_path / "pid")], env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
                              text=True, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "pid").exists():
        assert parent.poll() is None and time.monotonic() < deadline, parent.stderr.read()  # type: ignore[union-attr]
        time.sleep(0.05)
    init = int(Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()[0])
    nspid = [line for line in Path(f"/proc/{init}/status").read_text().splitlines() if line.startswith("NSpid:")]
    assert nspid[0].split()[-1] == "1", nspid
    return parent, init


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGUSR1])
def test_last_exit_as_a_pid_namespaces_init_passes_stop_signals_on_and_dies_with_its_parent(
        tmp_path: Path, sig: signal.Signals) -> None:
    # runc passes its signals to the container's init only, and the kernel gives a namespace's init only those it
    # handles: before, the command never saw a Ctrl-C or the scheduler's warning under R1
    parent, init = _init_of_new_pid_namespace(tmp_path)
    command = int(Path(f"/proc/{init}/task/{init}/children").read_text().split()[0])
    os.kill(init, sig)
    assert _exit_status_or_state(parent, init, command, tmp_path / "pid.got") == 3
    assert (tmp_path / "pid.got").read_text() == sig.name
    # a SIGKILL of the parent (the hard stop of runc's process group): the init asked for SIGKILL at its death, and
    # the namespace's processes end with it
    (tmp_path / "pid").unlink()
    parent, init = _init_of_new_pid_namespace(tmp_path)
    command = int(Path(f"/proc/{init}/task/{init}/children").read_text().split()[0])
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(30)
    deadline = time.monotonic() + 10
    while (_alive(init) or _alive(command)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(init) and not _alive(command)


def test_r1_is_refused_by_name_where_user_namespaces_are_disabled_or_runc_is_missing() -> None:
    # a real refusal: max_user_namespaces set to 0 inside a user namespace of the test's own (the kernel then
    # refuses every further one, as a site's sysctl does)
    probe = ("from hvdflow.images.runc_probe import probe_runc_mode; import platform; "
             "p = probe_runc_mode(); print(p.problem('R1')); print(platform.node())")
    limited = subprocess.run([sys.executable, str(REPO / "tests" / "limit_userns.py"), "0", sys.executable, "-c",
                              probe], capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(REPO / "src")})
    problem, node = limited.stdout.splitlines()
    assert problem == (f"user namespaces are disabled on {node} (user.max_user_namespaces = 0): execmode R1 cannot "
                       "run; use execmode auto or P1"), limited.stderr
    allowed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                             env={"PYTHONPATH": str(REPO / "src")})
    assert allowed.stdout.splitlines()[0] == "None", allowed.stdout  # here: runc installed (scripts/lib.sh), allowed
    assert RuncProbe("n3", None, "96364", None).problem("R1") == (
        "runc is not installed on n3 (looked for it on PATH and in /usr/sbin, /sbin): execmode R1 cannot run; "
        "install runc (Debian: apt install runc), or use execmode auto or P1")


RUNS = {"R1": ["sh", "-c", "echo R1 $$"], "P1": ["sh", "-c", "echo P1 $$"]}


def _chooser(runs: dict[str, list[str]], no_runc: str | None = None, max_user_namespaces: str | None = None
             ) -> subprocess.CompletedProcess[str]:
    """The mode chooser run for real, in a user namespace whose max_user_namespaces is limited where asked (a real
    refusal, as a site's sysctl gives)."""
    argv = chooser_argv(runs, no_runc)
    if max_user_namespaces is not None:
        argv = [sys.executable, str(REPO / "tests" / "limit_userns.py"), max_user_namespaces, *argv]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"PYTHONPATH": str(REPO / "src"), "PATH": os.environ["PATH"]})
    stdout, stderr = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.pid, proc.returncode, stdout, stderr)  # args: the pid it ran as


def test_auto_chooses_r1_on_a_node_that_allows_it_and_p1_where_user_namespaces_are_disabled() -> None:
    node = platform.node()
    here = _chooser(RUNS)
    # the chosen command replaced the chooser: the same pid, nothing left between the launcher and udocker
    assert (here.returncode, here.stdout) == (0, f"R1 {here.args}\n"), here.stderr
    assert here.stderr == f"# hvdflow: execmode auto chose R1 on {node} (user namespaces allowed, runc /usr/sbin/runc)\n"
    limited = _chooser(RUNS, max_user_namespaces="0")
    assert (limited.returncode, limited.stdout) == (0, f"P1 {limited.args}\n"), limited.stderr
    assert limited.stderr == (f"# hvdflow: execmode auto chose P1 on {node}: user namespaces are disabled on {node} "
                              "(user.max_user_namespaces = 0)\n")
    offered = _chooser({"P1": RUNS["P1"]}, no_runc="launcher mpi: Open MPI's ranks cannot reach mpirun")
    assert (offered.stdout.split()[0], offered.stderr) == (
        "P1", "# hvdflow: execmode auto chose P1: launcher mpi: Open MPI's ranks cannot reach mpirun\n")


def test_an_explicit_r1_on_a_node_without_user_namespaces_is_refused_by_name_before_udocker_runs() -> None:
    node = platform.node()
    refused = _chooser({"R1": RUNS["R1"]}, max_user_namespaces="0")
    assert (refused.returncode, refused.stdout) == (REFUSED, "")
    assert refused.stderr == (f"hvdflow: error: user namespaces are disabled on {node} (user.max_user_namespaces = 0): "
                              "execmode R1 cannot run; use execmode auto or P1\n")
    allowed = _chooser({"R1": RUNS["R1"]})
    assert (allowed.returncode, allowed.stdout.split()[0]) == (0, "R1"), allowed.stderr
    assert allowed.stderr == f"# hvdflow: execmode R1 on {node} (runc /usr/sbin/runc)\n"


def test_the_auto_runtime_offers_each_rank_r1s_and_p1s_commands_and_open_mpi_ranks_p1s_alone(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    runtime = make_runtime(settings, replace(_record(tmp_path / "udocker"), execmode="auto", runc_container="c1-r1"))
    argv = runtime.command(["python3", "-V"], {"HOROVOD_RANK": "0"}, [tmp_path])
    assert argv[:4] == [sys.executable, "-S", "-m", "hvdflow.images.execmode_choice"]
    plan = json.loads(argv[4])
    assert (list(plan["runs"]), plan["no_runc"]) == (["R1", "P1"], None)
    for mode, container in (("R1", "c1-r1"), ("P1", "c1")):
        run = plan["runs"][mode]
        assert run[run.index("run"):][-8:] == [container, *LAST_EXIT, "python3", "-V"]
        assert f"--env={MODE_ENV}={mode}" in run and "--env=HOROVOD_RANK=0" in run
        assert any(a.startswith("--user=") for a in run) == (mode == "P1")  # R1 runs as root of its user namespace
        assert (tmp_path / "udocker" / "containers" / container / "ROOT" / str(tmp_path).lstrip("/")).is_dir()
    assert runtime.gpu_setup() == NvidiaSetup(str(tmp_path / "udocker"), ["c1-r1", "c1"])
    assert runtime.process_env()["PYTHONPATH"].split(os.pathsep)[0] == str(REPO / "src")  # the chooser's hvdflow
    # Slurm's rank tasks pass their environment (hostenv) under every launcher: Gloo's ranks still get both modes
    slurm_gloo = json.loads(runtime.for_launcher("gloo").command(["python3", "-V"], {}, [tmp_path], hostenv=True)[4])
    assert list(slurm_gloo["runs"]) == ["R1", "P1"] and "--hostenv" in slurm_gloo["runs"]["R1"]
    mpi = json.loads(runtime.for_launcher("mpi").command(["python3", "-V"], {}, [tmp_path], hostenv=True)[4])
    assert (list(mpi["runs"]), mpi["no_runc"]) == (
        ["P1"], "launcher mpi: Open MPI's ranks cannot reach mpirun's PMIx server from runc's namespaces")
    assert runtime.for_launcher("gloo") is runtime
    single = make_runtime(settings, replace(_record(tmp_path / "udocker"), execmode="auto"))
    assert json.loads(single.command(["python3", "-V"], {}, [tmp_path])[4])["no_runc"].startswith("no R1 container")
    p1 = make_runtime(settings, _record(tmp_path / "udocker")).command(["python3", "-V"], {}, [tmp_path])
    # an explicit P1: udocker directly, no chooser
    assert p1[p1.index("run"):][-8:] == ["c1", *LAST_EXIT, "python3", "-V"] and f"--env={MODE_ENV}=P1" in p1
    assert "hvdflow.images.execmode_choice" not in p1


def test_the_benchmark_takes_each_modes_container_from_autos_record_and_names_a_mode_never_made(tmp_path: Path) -> None:
    auto = replace(_record(tmp_path), execmode="auto", runc_container="c1-r1")
    assert (container_in_mode(auto, "R1").container, container_in_mode(auto, "R1").execmode) == ("c1-r1", "R1")
    assert (container_in_mode(auto, "P1").container, container_in_mode(auto, "P1").execmode) == ("c1", "P1")
    with pytest.raises(ImageError, match=r"^image hvdflow-cpu: no R1 container was made \(the node that pulled the "
                                         r"image could not run R1: its pull_image log says why\)$"):
        container_in_mode(replace(auto, runc_container=None), "R1")
    with pytest.raises(ImageError, match=r"^image hvdflow-cpu: no R1 container was made, only execmode P1's; set "
                                         r"execmode: auto or R1 in the profile$"):
        container_in_mode(_record(tmp_path), "R1")
