"""The ``hvdflow`` command: build, push and pull images, install cluster profiles, serve a test registry, run the
smoke job, rerun a recorded run, report how a run used its allocation, start the test-bed cluster."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from hvdflow.config.profile import LAUNCHERS
from hvdflow.errors import HvdflowError
from hvdflow.files.heartbeat import heartbeat, to_stderr
from hvdflow.images.catalog import PROOT_ENGINES, get_image, load_catalog
from hvdflow.images.modes import PROFILE_EXECMODES
from hvdflow.runtime.settings import allow_root_from_env
from hvdflow_wire.names import FRAMEWORKS
from hvdflow_wire.usage import DEFAULT_USAGE_SECONDS

if TYPE_CHECKING:
    from hvdflow.runtime import RuntimeSettings


def default_udocker_dir() -> Path:
    """``$HVDFLOW_UDOCKER_DIR``, else ``~/.local/share/hvdflow/udocker``: one per user."""
    env = os.environ.get("HVDFLOW_UDOCKER_DIR")
    return Path(env) if env else Path.home() / ".local" / "share" / "hvdflow" / "udocker"


def _catalog_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("image", help="image name in the catalogue")
    parser.add_argument("--catalog", type=Path, default=Path("containers/catalog.yaml"), help="image catalogue")


def _registry_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--registry", default=os.environ.get("HVDFLOW_REGISTRY"),
                        help="registry URL, e.g. http://127.0.0.1:5000 (default: $HVDFLOW_REGISTRY); for a pull, `none`: "
                        "the image the lock pins, as `hvdflow image load` loaded it")


def _lock_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lock", type=Path, default=None, help="lock file (default: images.lock.yaml beside the catalogue)")


def _lock_path(args: argparse.Namespace) -> Path:
    return Path(args.lock or args.catalog.parent / "images.lock.yaml")


def _pull_args(parser: argparse.ArgumentParser, registry: bool = True) -> None:
    _catalog_args(parser)
    if registry:
        _registry_arg(parser)
    _lock_arg(parser)
    parser.add_argument("--udocker-dir", type=Path, default=None, help="udocker directory (default: $HVDFLOW_UDOCKER_DIR "
                        "or ~/.local/share/hvdflow/udocker)")
    parser.add_argument("--execmode", choices=PROFILE_EXECMODES, default=None,
                        help="udocker execution mode (default: catalogue's; auto: R1 where this node can run it, else P1)")
    parser.add_argument("--allow-root", action="store_true", default=allow_root_from_env(),
                        help="let udocker run as root (default: refused; HVDFLOW_ALLOW_ROOT=1 sets this)")


def _require_registry(args: argparse.Namespace) -> str:
    if not args.registry:
        raise HvdflowError("no registry given: pass --registry URL or set HVDFLOW_REGISTRY")
    return str(args.registry).rstrip("/")


def _udocker_settings(args: argparse.Namespace) -> "RuntimeSettings":
    """The udocker runtime the image commands' flags ask for (``--udocker-dir``, ``--proot``, ``--allow-root``),
    checked as a profile's ``runtime:`` section is."""
    from dataclasses import replace

    from hvdflow.runtime import runtime_settings

    section = {"kind": "udocker", "udocker_dir": str(args.udocker_dir or default_udocker_dir()),
               "proot": getattr(args, "proot", "image")}
    return replace(runtime_settings("the command line", section, getattr(args, "launcher", "gloo")),
                   allow_root=args.allow_root)


def _pull(args: argparse.Namespace, update_lock: bool = False):  # type: ignore[no-untyped-def]
    """Pull (or, given ``args.archive``, load) the image into udocker's store, verified and locked, and create its
    container; the store and the container's record."""
    from hvdflow.images.lockfile import read_lock
    from hvdflow.images.offline import NO_REGISTRY
    from hvdflow.runtime import image_store

    catalog = load_catalog(args.catalog)
    spec = get_image(catalog, args.image, args.catalog)
    store = image_store("udocker", args.udocker_dir or default_udocker_dir(), allow_root=args.allow_root)
    lock = _lock_path(args)
    before = read_lock(lock).get(spec.name)
    archive: Optional[Path] = getattr(args, "archive", None)
    with heartbeat(to_stderr, f"{'loading' if archive else 'pulling'} {spec.name}", store.progress):
        if archive is not None:
            manifest = store.load(spec, archive, lock, update_lock=update_lock)
        elif getattr(args, "registry", None) == NO_REGISTRY and not update_lock:
            manifest = store.loaded(spec, lock)
        else:
            manifest = store.pull(spec, spec.registry or _require_registry(args), lock, update_lock=update_lock)
    if update_lock and before is not None and before.digest != manifest.digest:
        print(f"hvdflow: {lock}: {spec.name} ({spec.reference}) moved from {before.digest} to {manifest.digest}",
              file=sys.stderr)
    return store, store.create(spec, manifest, args.execmode)


def cmd_image_pull(args: argparse.Namespace) -> int:
    """Pull, verify and lock an image, create its container, and print the container record."""
    _, record = _pull(args)
    sys.stdout.write(record.to_json())
    return 0


def cmd_image_check(args: argparse.Namespace) -> int:
    """Pull (or take the loaded) image, start it once and print what it holds against what jobs need of it."""
    from hvdflow.errors import ImageError
    from hvdflow.launch.image_check import SOURCE_MODULES, check_image, needs_of, refusal, table
    from hvdflow.runtime import make_runtime

    store, record = _pull(args)
    spec = get_image(load_catalog(args.catalog), args.image, args.catalog)
    purposes = args.purposes.split(",") if args.purposes else list(spec.purposes)
    sources = args.sources.split(",") if args.sources else sorted(SOURCE_MODULES)
    framework = args.framework or ("pytorch" if spec.tensorflow == "none" and spec.torch != "none" else "tensorflow")
    needs = needs_of(purposes, args.launcher, spec.device == "gpu", sources, framework)
    runtime = make_runtime(_udocker_settings(args), record)
    check = check_image(runtime, record.digest, store.checks_dir, needs)
    sys.stdout.write(table(spec.name, record.digest, check.parts))
    problem = refusal(spec.name, check.parts)
    if problem is not None:
        raise ImageError(problem)
    return 0


def cmd_image_save(args: argparse.Namespace) -> int:
    """Write the image the lock pins to an OCI archive (for a site without registry access)."""
    from hvdflow.images.offline import save_image

    spec = get_image(load_catalog(args.catalog), args.image, args.catalog)
    with heartbeat(to_stderr, f"saving {spec.name} to {args.archive}"):
        manifest = save_image(spec, spec.registry or _require_registry(args), _lock_path(args), args.archive)
    print(json.dumps({"image": spec.name, "reference": spec.reference, "digest": manifest.digest,
                      "archive": str(args.archive), "bytes": args.archive.stat().st_size}))
    return 0


def cmd_image_update(args: argparse.Namespace) -> int:
    """Pull an image whose tag moved in the registry and lock its new digest (saying both); print the record."""
    _, record = _pull(args, update_lock=True)
    sys.stdout.write(record.to_json())
    return 0


def cmd_image_build(args: argparse.Namespace) -> int:
    """Build an image from its recipe into the cache (as root, or in a user namespace where this user is root)."""
    from hvdflow.images.build.image import BuildProgress, build_image

    spec = get_image(load_catalog(args.catalog), args.image, args.catalog)
    args.log.parent.mkdir(parents=True, exist_ok=True)
    progress = BuildProgress()
    with heartbeat(to_stderr, f"building {spec.name}", lambda: progress.text(args.log)):
        image = build_image(spec, args.log, args.debian, progress)
    built = {"layout": str(image.layout), "tag": image.tag, "manifest_digest": image.manifest_digest}
    if args.archive is not None:
        from hvdflow.images.archive import archive_layout

        with heartbeat(to_stderr, f"writing {spec.name} to {args.archive}"):
            archive_layout(image.layout, args.archive)
        built["archive"] = str(args.archive)
        print(f"hvdflow: load it where it runs: hvdflow image load {spec.name} {args.archive}", file=sys.stderr)
    print(json.dumps(built))
    return 0


def cmd_image_pin(args: argparse.Namespace) -> int:
    """Write the sha256 of every file PyPI holds of each pinned requirement of an image's recipe."""
    from hvdflow.images.build.pins import pin_requirement_hashes
    from hvdflow.images.recipe import load_recipe

    spec = get_image(load_catalog(args.catalog), args.image, args.catalog)
    if spec.recipe is None:
        raise HvdflowError(f"image {spec.name} has no recipe in {args.catalog}")
    requirements = load_recipe(spec.recipe, check_hashes=False).requirements
    print(f"{requirements}: {pin_requirement_hashes(requirements)} requirements pinned with their sha256")
    return 0


def cmd_image_push(args: argparse.Namespace) -> int:
    """Build (or take from the cache) an image and push it to a registry."""
    from hvdflow.images.build.image import BuildProgress, build_image, push_image

    spec = get_image(load_catalog(args.catalog), args.image, args.catalog)
    registry = _require_registry(args)
    progress = BuildProgress()
    with heartbeat(to_stderr, f"building and pushing {spec.name}", lambda: progress.text(args.log)):
        image = build_image(spec, args.log, args.debian, progress)
        progress.enter(f"pushing to {registry}", args.log)
        push_image(image, registry, spec.repository, spec.tag, args.log)
    print(json.dumps({"pushed": f"{registry}/{spec.reference}", "manifest_digest": image.manifest_digest}))
    return 0


def cmd_smoke(args: argparse.Namespace) -> int:
    """Pull the image and train the digits MLP with N ranks; print the summary."""
    from hvdflow.pipeline.smoke import run_smoke
    from hvdflow.runtime import make_runtime

    _, record = _pull(args)
    runtime = make_runtime(_udocker_settings(args), record)
    summary = run_smoke(runtime, record, args.launcher, args.ranks, args.out.resolve(), args.epochs, args.fail_rank,
                        args.usage_seconds)
    print(json.dumps(summary, indent=2, sort_keys=True))
    return 0


def cmd_registry_serve(args: argparse.Namespace) -> int:
    """Serve a registry on 127.0.0.1 until SIGTERM or SIGINT (for demos and tests)."""
    import signal

    from hvdflow.testbed.registry_server import start_registry

    proc, url = start_registry(args.state_dir.resolve(), args.port)
    print(url, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        return proc.wait()


def cmd_testbed(args: argparse.Namespace) -> int:
    """Start, stop or show the test-bed Slurm cluster (root)."""
    from hvdflow.testbed import cluster as testbed

    layout = testbed.default_layout(args.base, args.nodes, args.proctrack)
    if args.action == "start":
        started = time.monotonic()
        testbed.start(layout)
        print(f"test bed up: nodes {', '.join(layout.node_names)} in {time.monotonic() - started:.1f} s\n"
              f"its Slurm clients read: export SLURM_CONF={testbed.client_env(layout)['SLURM_CONF']}")
    elif args.action == "stop":
        testbed.stop(layout)
    else:
        print(json.dumps(testbed.status(layout), indent=2))
    return 0


def cmd_profile_install(args: argparse.Namespace) -> int:
    """Install a profile of ``profiles/`` where Snakemake finds it by name, and say how to use it."""
    from hvdflow.config.profile_install import install_profile

    installed = install_profile(args.profiles / args.name, args.as_name or args.name, force=args.force)
    state = "installed" if installed.changed else "already installed"
    print(f"{installed.source} {state} as {installed.target}\nrun: snakemake --profile {installed.name}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check this login node, the profile's Slurm partition and one compute node, each finding printed as it is made
    (with --json: all at the end); 1 if anything fails, 128 + the signal's number where a signal stopped it (its
    node job cancelled)."""
    return _doctor(args.profile, args.configfile, with_job=not args.no_job, wait=args.wait, as_json=args.json)


def _doctor(profile: Optional[str], configfile: Path, with_job: bool, wait: float, as_json: bool) -> int:
    import signal

    from hvdflow.doctor.findings import exit_status, render_counts, render_finding, render_json
    from hvdflow.doctor.run import run_doctor, ticket_facts
    from hvdflow.slurm.probe_job import Stopped, stop_on_signals

    about = ticket_facts(Path.cwd())
    findings = []
    try:
        with stop_on_signals():
            for finding in run_doctor(profile, Path.cwd(), configfile, about, with_job=with_job, wait=wait):
                findings.append(finding)
                if not as_json:
                    print(render_finding(finding), flush=True)
    except (Stopped, KeyboardInterrupt) as stop:
        signum = stop.signum if isinstance(stop, Stopped) else signal.SIGINT
        print(f"hvdflow doctor: stopped by {signal.Signals(signum).name} after {len(findings)} findings; nothing of "
              "its is left in Slurm's queue", file=sys.stderr, flush=True)
        return 128 + signum
    print(render_json(findings, about) if as_json else render_counts(findings), flush=True)
    return exit_status(findings)


def cmd_site_new(args: argparse.Namespace) -> int:
    """Write ``profiles/NAME/`` from what the cluster says, then run hvdflow doctor with it: its exit status, 1
    where a value does not fit the cluster (nothing written), 128 + the signal's number where one stopped it."""
    import signal

    from hvdflow.site.ask import Asker
    from hvdflow.site.new import SiteRequest, new_site
    from hvdflow.slurm.probe_job import Stopped, stop_on_signals

    request = SiteRequest(name=args.name, profiles=Path.cwd() / "profiles", partition=args.partition,
                          cpu_partition=args.cpu_partition, account=args.account, gpu_type=args.gpu_type,
                          gpus_per_node=args.gpus_per_node, scratch=args.scratch, interface=args.interface,
                          registry=args.registry, force=args.force, wait=args.wait)
    asker = Asker(interactive=not args.yes and sys.stdin.isatty())
    try:
        with stop_on_signals():
            target = new_site(request, asker, lambda line: print(line, file=sys.stderr, flush=True))
    except (Stopped, KeyboardInterrupt) as stop:
        signum = stop.signum if isinstance(stop, Stopped) else signal.SIGINT
        print(f"hvdflow site new: stopped by {signal.Signals(signum).name}; nothing written, nothing left in Slurm's "
              "queue", file=sys.stderr, flush=True)
        return 128 + signum
    print(f"hvdflow site new: wrote {target}/config.yaml and hvdflow.yaml; run: snakemake --profile "
          f"{target.relative_to(Path.cwd())}", flush=True)
    if args.no_doctor:
        return 0
    print(f"hvdflow site new: hvdflow doctor --profile {args.name}", flush=True)
    return _doctor(args.name, args.configfile, with_job=True, wait=args.wait, as_json=False)


def cmd_rerun(args: argparse.Namespace) -> int:
    """Rerun a recorded run and compare: 0 identical, 3 differs, 4 differs within the tolerance."""
    from hvdflow.rerun.run import RerunRequest, rerun

    request = RerunRequest(record=args.record, into=args.into, repo=args.repo, inputs_from=args.inputs_from,
                           registry=args.registry, image_archive=args.image_archive, allow_dirty=args.allow_dirty,
                           tolerance=args.tolerance)
    return rerun(request).exit_status


def cmd_report(args: argparse.Namespace) -> int:
    """Print how a recorded run used its allocation and what limited it."""
    from hvdflow.pipeline.run_report import read_record, record_path, report_text
    from hvdflow.slurm.sacct import job_accounting

    record = read_record(record_path(args.run))
    slurm = record.get("slurm")
    print(report_text(record, job_accounting(str(slurm["job_id"])) if slurm else None), end="")
    return 0


def _exec_as_namespace_root(argv: list[str]) -> None:
    """Run this command again, in place of this process, as root of a user namespace holding this user's
    subordinate ids (mmdebstrap and chroot need root; ``images.build.rootless`` says how)."""
    from hvdflow.images.build.rootless import rootless_argv

    command = rootless_argv([sys.executable, "-m", "hvdflow", *argv])
    print(f"hvdflow: building without root, in a user namespace: {' '.join(command[:3])}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os.execvp(command[0], command)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``hvdflow`` command: one sub-command each, added by its own function."""
    parser = argparse.ArgumentParser(prog="hvdflow", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_image_parsers, _registry_parser, _smoke_parser, _profile_parsers, _site_parser, _doctor_parser,
                _rerun_parser, _report_parser, _testbed_parser):
        add(sub)
    return parser


def _image_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``hvdflow image build|push|pin|pull|update|check|save|load``."""
    from hvdflow.images.build.pins import DEBIAN_MODES

    image = sub.add_parser("image", aliases=["images"], help="build, push, pull and update images"
                           ).add_subparsers(dest="action", required=True)
    for name, func, helptext in (("build", cmd_image_build, "build an image from its recipe"),
                                 ("push", cmd_image_push, "build and push an image to a registry")):
        p = image.add_parser(name, help=helptext)
        _catalog_args(p)
        if name == "push":
            _registry_arg(p)
        else:
            p.add_argument("--archive", type=Path, default=None, help="also write the built image to this OCI "
                           "archive, digest intact (`hvdflow image load NAME ARCHIVE` takes it; no registry needed)")
        p.add_argument("--log", type=Path, default=Path("logs/image-build.log"), help="build log")
        p.add_argument("--debian", choices=DEBIAN_MODES, default="check", help="where Debian's mirror no longer serves "
                       "a version the recipe's Debian manifest pins: check (default: fail, naming the packages), follow "
                       "(take the mirror's version and say which), pin (apt unpinned; rewrite the manifest: a new image)")
        p.set_defaults(func=func, builds_rootfs=True)
    pin = image.add_parser("pin", help="write the sha256 of every file PyPI holds of each pinned Python requirement "
                           "of the image's recipe (pip installs them with --require-hashes)")
    _catalog_args(pin)
    pin.set_defaults(func=cmd_image_pin)
    pull = image.add_parser("pull", help="pull, verify and lock an image and create its container")
    _pull_args(pull)
    pull.set_defaults(func=cmd_image_pull)
    update = image.add_parser("update", help="accept the digest a locked image's tag now resolves to: pull (or load "
                              "--archive), verify, rewrite its lock entry (both digests said) and create its container")
    _pull_args(update)
    update.add_argument("--archive", type=Path, default=None, help="take the new image from this OCI archive, not the "
                        "registry")
    update.set_defaults(func=cmd_image_update)
    check = image.add_parser("check", help="start the image once and judge what it holds against what the jobs need "
                             "(Python, TensorFlow and tf.keras, Horovod and its controllers, numpy, the preparation "
                             "libraries, CUDA); exit 1 naming every missing part and what it blocks")
    _pull_args(check)
    check.add_argument("--purposes", default=None, help="train,prepare (default: the catalogue's purposes)")
    check.add_argument("--launcher", choices=LAUNCHERS, default="gloo", help="the controller training needs")
    check.add_argument("--sources", default=None, help="the dataset sources it must prepare (default: all)")
    check.add_argument("--framework", choices=FRAMEWORKS, default=None,
                       help="what trains in it (default: pytorch for an image the catalogue gives torch and no TensorFlow)")
    check.add_argument("--proot", choices=PROOT_ENGINES, default="image", help="the proot of udocker's P1/P2")
    check.set_defaults(func=cmd_image_check)
    save = image.add_parser("save", help="write the image the lock pins to an OCI archive, digest intact")
    _catalog_args(save)
    save.add_argument("archive", type=Path, help="the archive to write (a tar of an OCI image layout)")
    _registry_arg(save)
    _lock_arg(save)
    save.set_defaults(func=cmd_image_save)
    load = image.add_parser("load", help="load an image from an OCI archive (no registry): verify every blob, hold "
                            "its digest against the lock (or lock it), create its container")
    _pull_args(load, registry=False)
    load.add_argument("archive", type=Path, help="an OCI archive, e.g. from `hvdflow image save`")
    load.set_defaults(func=cmd_image_pull)


def _registry_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``hvdflow registry serve``."""
    registry = sub.add_parser("registry", help="a local registry").add_subparsers(dest="action", required=True)
    serve = registry.add_parser("serve", help="serve Debian's docker-registry on 127.0.0.1 until stopped")
    serve.add_argument("--state-dir", type=Path, required=True, help="config, storage and log of the registry")
    serve.add_argument("--port", type=int, default=None, help="port on 127.0.0.1 (default: a free one)")
    serve.set_defaults(func=cmd_registry_serve)


def _smoke_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``hvdflow smoke``."""
    smoke = sub.add_parser("smoke", help="train the digits MLP with Horovod ranks in the container")
    _pull_args(smoke)
    smoke.add_argument("--launcher", choices=LAUNCHERS, default="gloo")
    smoke.add_argument("--proot", choices=PROOT_ENGINES, default="image",
                       help="the proot of udocker's P1/P2: the image's (default) or the host's /usr/bin/proot")
    smoke.add_argument("--ranks", type=int, default=2)
    smoke.add_argument("--epochs", type=int, default=5)
    smoke.add_argument("--out", type=Path, default=Path("results/smoke"))
    smoke.add_argument("--fail-rank", type=int, default=-1, help=argparse.SUPPRESS)
    smoke.add_argument("--usage-seconds", type=float, default=DEFAULT_USAGE_SECONDS,
                       help="seconds between samples of each rank's CPU and memory use (0: none)")
    smoke.set_defaults(func=cmd_smoke)


def _profile_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``hvdflow profile install``."""
    profile = sub.add_parser("profile", help="cluster profiles").add_subparsers(dest="action", required=True)
    install = profile.add_parser("install", help="install a profile where `snakemake --profile NAME` finds it "
                                 "(the user's Snakemake config folder, ~/.config/snakemake)")
    install.add_argument("name", help="a folder of --profiles, e.g. testbed or your site's copy of slurm")
    install.add_argument("--as", dest="as_name", default=None, help="the name to install it under (default: its own), "
                         "e.g. --as cluster for `snakemake --profile cluster`")
    install.add_argument("--profiles", type=Path, default=Path("profiles"), help="where the profiles are "
                         "(default: profiles/ of the working directory)")
    install.add_argument("--force", action="store_true", help="replace an installed profile of that name that differs")
    install.set_defaults(func=cmd_profile_install)


def _site_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``hvdflow site new``."""
    site = sub.add_parser("site", help="a new cluster's profile").add_subparsers(dest="action", required=True)
    new = site.add_parser("new", help="write profiles/NAME/ from what Slurm says, then run hvdflow doctor with it",
                          description="Reads sinfo, scontrol and sacctmgr on this login node and runs one short probe "
                          "job on the training partition (scratch, interfaces, user namespaces, GPUs); on a terminal "
                          "asks where there is a real choice (partition, account, GPU type), the default marked. "
                          "Each value is written with a comment saying where it came from. Run it in the checkout.")
    new.add_argument("name", help="the profile's name: profiles/NAME/")
    new.add_argument("--partition", help="the training jobs' partition (default: asked; Slurm's default if it has GPUs)")
    new.add_argument("--cpu-partition", help="the other jobs' partition (default: Slurm's default partition)")
    new.add_argument("--account", help="the account charged (default: asked; your default account)")
    new.add_argument("--gpu-type", help="the GRES type the training jobs ask for where nodes have several "
                     "(default: asked; any type)")
    new.add_argument("--gpus-per-node", type=int, default=None, help="GPUs per node (default: the partition's; 0: "
                     "train on CPUs)")
    new.add_argument("--scratch", help="the node-local scratch directory (default: the first node-local one of "
                     "$TMPDIR, /local, /scratch/local, /localscratch, /lscratch, /tmp)")
    new.add_argument("--interface", help="the ranks' network interface (default: ib*/hsn* before the fastest other)")
    new.add_argument("--registry", default=None, help="the images' registry URL, or none: images built or loaded "
                     "from an archive (default: $HVDFLOW_REGISTRY, written as ${HVDFLOW_REGISTRY}: read each run)")
    new.add_argument("--yes", action="store_true", help="ask nothing: take each default (also without a terminal)")
    new.add_argument("--force", action="store_true", help="replace profiles/NAME/ if it exists")
    new.add_argument("--no-doctor", action="store_true", help="do not run hvdflow doctor with the new profile")
    new.add_argument("--configfile", type=Path, default=Path("config/config.yaml"),
                     help="the workflow config doctor checks (default: config/config.yaml)")
    new.add_argument("--wait", type=float, default=600.0, metavar="SECONDS",
                     help="how long the probe job (and doctor's) may wait in the queue (default: 600)")
    new.set_defaults(func=cmd_site_new)


def _doctor_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``hvdflow doctor``."""
    doctor = sub.add_parser("doctor", help="check this login node, the profile's cluster and one compute node "
                            "(what to run first on a new cluster, and to attach to a support ticket)",
                            description="Each check prints ok, warning or failure, with the fix for the last two. "
                            "Run it in the workflow's checkout. Exit status 1 if any check fails.")
    doctor.add_argument("--profile", default=None, help="the profile as `snakemake --profile` takes it (a folder, an "
                        "installed name, or a name in profiles/); default: the embedded default, profiles/local")
    doctor.add_argument("--configfile", type=Path, default=Path("config/config.yaml"),
                        help="the workflow config whose images and datasets are checked (default: config/config.yaml)")
    doctor.add_argument("--json", action="store_true", help="print the findings as JSON, for a ticket")
    doctor.add_argument("--no-job", action="store_true", help="leave out the Slurm job on a compute node")
    doctor.add_argument("--wait", type=float, default=600.0, metavar="SECONDS",
                        help="how long the compute node's job may wait in the queue before it is cancelled and the "
                             "check said to run later (default: 600; while it waits, Slurm's reason every 30 s)")
    doctor.set_defaults(func=cmd_doctor)


def _rerun_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``hvdflow rerun``."""
    from hvdflow.rerun.compare import DEFAULT_TOLERANCE, EXIT_DIFFERS, EXIT_WITHIN_TOLERANCE

    again = sub.add_parser("rerun", help="rerun a recorded run (its run.json) as recorded and compare the results",
                           description=f"Rerun results/<experiment>/run.json with its recorded code revision, config, "
                           f"profile settings, image digest and prepared dataset, then print the recorded and the new "
                           f"results side by side. Exit 0: identical; {EXIT_DIFFERS}: differs; {EXIT_WITHIN_TOLERANCE}: "
                           f"other weights but every final metric within --tolerance; 1: refused (the reason named).")
    again.add_argument("record", type=Path, help="the recorded run's run.json")
    again.add_argument("--into", type=Path, default=None, help="the new worktree (default: reruns/<experiment>-<time> "
                       "in the recorded run's directory)")
    again.add_argument("--repo", type=Path, default=None, help="git repository holding the recorded commit (default: "
                       "the checkout the run was made in)")
    again.add_argument("--inputs-from", type=Path, default=None, help="directory holding the recorded inputs at their "
                       "recorded paths (default: the recorded run's directory; none there: prepared afresh)")
    again.add_argument("--allow-dirty", action="store_true", help="rerun the clean commit of a run made with "
                       "uncommitted changes that are no longer available, or HEAD for a run with no revision")
    again.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, help="largest absolute difference of a "
                       f"final metric that counts as agreeing when the weights differ (default {DEFAULT_TOLERANCE})")
    again.add_argument("--registry", default=None, help="pull from this registry instead of the recorded one (the "
                       "recorded digest must still match)")
    again.add_argument("--image-archive", type=Path, default=None, help="take the recorded image from this OCI archive "
                       "(`hvdflow image save`) and use no registry: the archive must hold the recorded digest")
    again.set_defaults(func=cmd_rerun)


def _report_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``hvdflow report RUN``."""
    report = sub.add_parser("report", help="how a recorded run used its allocation, and what limited it",
                            description="Print each rank's step times (waiting for input, computing, waiting for the "
                            "other ranks), its CPU use, memory and GPU, the split per epoch, Slurm's accounting of "
                            "the job (sacct) where it ran in one, and a one-line verdict with the fix (a "
                            "straggler, input-bound, communication-bound or compute-bound).")
    report.add_argument("run", type=Path, help="the run's run.json, or its folder (results/<experiment>)")
    report.set_defaults(func=cmd_report)


def _testbed_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``hvdflow testbed start|stop|status``."""
    bed = sub.add_parser("testbed", help="a real Slurm cluster on this machine, nodes in namespaces (root)")
    bed.add_argument("action", choices=("start", "stop", "status"))
    bed.add_argument("--base", type=Path, default=None, help="its files (default: $HVDFLOW_TESTBED_DIR or "
                     "/var/lib/hvdflow-testbed)")
    bed.add_argument("--nodes", type=int, default=2, help="slurmd nodes, each in its own namespaces")
    bed.add_argument("--proctrack", choices=("linuxproc", "cgroup"), default=None,
                     help="how slurmd tracks a job's processes (default: $HVDFLOW_TESTBED_PROCTRACK or linuxproc); "
                     "cgroup signals only each task's top process, as production clusters do")
    bed.set_defaults(func=cmd_testbed)


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point: run the chosen command; user errors print one line and exit 1."""
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        if getattr(args, "builds_rootfs", False) and os.geteuid() != 0:
            _exec_as_namespace_root(sys.argv[1:] if argv is None else argv)
        return func(args)
    except HvdflowError as exc:
        print(f"hvdflow: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
