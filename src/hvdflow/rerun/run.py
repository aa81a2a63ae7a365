"""``hvdflow rerun``: a recorded run, run again as recorded, and compared with its record.

The steps, each refusing with a named reason before any training: the record is read and checked; the recorded code
revision is checked out as a git worktree (``worktree``); the recorded config, profile and image lock are written
into it (``recreate``); Snakemake pulls the image there (or, from ``--image-archive``, it is loaded first and the
profile gets no registry), which the lock pins to the recorded digest, so a registry
that serves other bytes under the tag is refused with both digests named; the prepared dataset is taken from the
recorded run's directory after its sha256 are checked, or prepared afresh and checked (``inputs``); Snakemake trains
the experiment with the recorded code; the new record is compared with the old (``compare``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from hvdflow.config.profile import recorded_runtime
from hvdflow.errors import HvdflowError, RerunRefused
from hvdflow.files.atomic import write_text_atomic
from hvdflow.images.catalog import get_image, load_catalog
from hvdflow.images.offline import NO_REGISTRY
from hvdflow.rerun import inputs
from hvdflow.rerun.compare import DEFAULT_TOLERANCE, Comparison, compare, table
from hvdflow.rerun.recreate import Settings, read_record, recreate, workdir_of
from hvdflow.rerun.user_code import restore_user_code
from hvdflow.rerun.worktree import check_out, remove, repository_of
from hvdflow.runtime import image_store

LOG_TAIL = 3000


@dataclass(frozen=True)
class RerunRequest:
    """What the user asked to rerun, and how."""

    record: Path
    into: Optional[Path] = None
    """The new worktree (default: ``reruns/<experiment>-<UTC time>`` in the recorded run's directory)."""
    repo: Optional[Path] = None
    """The git repository to check the recorded commit out of (default: the one the run was made in)."""
    inputs_from: Optional[Path] = None
    """Where the recorded inputs are (default: the recorded run's working directory)."""
    registry: Optional[str] = None
    """A registry to pull from instead of the recorded one (the digest must still match)."""
    image_archive: Optional[Path] = None
    """An OCI archive of the recorded image (``hvdflow image save``): loaded, checked against the recorded digest,
    and the rerun's profile gets no registry (a site without registry access)."""
    allow_dirty: bool = False
    tolerance: float = DEFAULT_TOLERANCE


def _snakemake(root: Path, settings: Settings, target: str, log: Optional[Path], what: str) -> None:
    """Run Snakemake in the worktree for ``target``; HvdflowError (with the end of ``log``) if it fails."""
    argv = [sys.executable, "-m", "snakemake", "--profile", str(settings.snakemake_profile),
            "--configfile", str(settings.experiment_config), "--", target]
    print(f"hvdflow rerun: {what}: {' '.join(argv[1:])} (in {root})", flush=True)
    proc = subprocess.Popen(argv, cwd=root, stdin=subprocess.DEVNULL)
    interrupted = False
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:  # Snakemake, in this terminal's process group, got the same Ctrl-C: let it stop
            interrupted = True     # its ranks after their checkpoint (subprocess.run would SIGKILL it, orphaning them)
    if interrupted:
        raise HvdflowError(f"interrupted while {what}; Snakemake stopped (exit {code}). The rerun's worktree {root} "
                           f"stays: `snakemake --profile {settings.snakemake_profile} --configfile "
                           f"{settings.experiment_config} -- {target}` there goes on from where it stopped")
    if code != 0:
        detail = ""
        if log is not None and log.is_file():
            detail = ":\n" + log.read_text(errors="replace")[-LOG_TAIL:].strip()
        raise HvdflowError(f"{what} failed (Snakemake exit {code}; log {log or root / '.snakemake/log'})" + detail)


def _prepared_inputs(record: dict, root: Path, settings: Settings, source: Path) -> str:  # type: ignore[type-arg]
    """Put the recorded inputs in the worktree (verified copies, or a fresh preparation that is then verified);
    say which."""
    recorded = record["inputs_sha256"]
    if inputs.present(recorded, source):
        inputs.verify(recorded, source)
        inputs.place(recorded, source, root)
        return f"the recorded inputs from {source}, sha256 checked"
    index = next((name for name in recorded if Path(name).name == "index.json"), None)
    if index is None:
        raise RerunRefused(f"the record names no dataset index among its inputs ({', '.join(sorted(recorded))})")
    _snakemake(root, settings, index, None, f"preparing the dataset afresh ({source} has none of the recorded inputs)")
    inputs.verify(recorded, root, record.get("dataset_index_content_sha256"))
    return "prepared afresh, sha256 checked"


def _load_recorded_image(record: dict, root: Path, settings: Settings, archive: Path) -> None:  # type: ignore[type-arg]
    """Load the recorded image from ``archive`` into the recorded udocker directory; the worktree's lock pins the
    recorded digest, so an archive of other bytes is refused with both digests named."""
    catalog = root / record["config"]["catalog"]
    spec = get_image(load_catalog(catalog), record["image"]["name"], catalog)
    runtime = recorded_runtime(record["profile"])
    store = image_store(runtime["kind"], Path(runtime["udocker_dir"]))
    print(f"hvdflow rerun: loading {spec.reference} from {archive}", flush=True)
    store.load(spec, archive.resolve(), root / settings.lock)


def rerun(request: RerunRequest) -> Comparison:
    """Rerun the recorded run; print and write (``<worktree>/rerun.json``) the comparison and return it."""
    record = read_record(request.record)
    workdir = workdir_of(request.record)
    repo = request.repo or repository_of(workdir, record["code"].get("commit"))
    name = record["experiment"]
    into = (request.into or workdir / "reruns" / f"{name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}").resolve()
    checkout = check_out(record["code"], repo, into, request.allow_dirty)
    print(f"hvdflow rerun: {request.record} -> {into} at {checkout.commit}"
          + (" with the recorded uncommitted changes" if checkout.diff_applied else ""), flush=True)
    if checkout.note:
        print(f"hvdflow rerun: note: {checkout.note}", flush=True)
    try:
        restored = restore_user_code(record, workdir, into)
    except RerunRefused as exc:
        remove(repo, into)  # nothing ran there: a refused rerun leaves no worktree behind
        raise RerunRefused(f"{exc} (the rerun's worktree {into} was removed)") from None
    for line in restored:
        print(f"hvdflow rerun: {line}", flush=True)
    settings = recreate(record, into, NO_REGISTRY if request.image_archive else request.registry)
    image = record["image"]["name"]
    if request.image_archive is not None:
        _load_recorded_image(record, into, settings, request.image_archive)
    try:
        _snakemake(into, settings, f"resources/images/{image}.json", into / "logs" / "pull_image" / f"{image}.log",
                   f"pulling {record['image']['reference']} pinned at {record['image']['digest']}")
    except HvdflowError as exc:
        raise HvdflowError(f"{exc}\nIf the registry has moved, pass --registry URL; without one, --image-archive FILE "
                           f"(an archive `hvdflow image save` made)") from None
    how = _prepared_inputs(record, into, settings, (request.inputs_from or workdir).resolve())
    print(f"hvdflow rerun: dataset: {how}", flush=True)
    new_record = into / "results" / name / "run.json"
    _snakemake(into, settings, str(new_record.relative_to(into)), into / "logs" / "train" / f"{name}.log",
               f"training {name}")
    try:
        new = json.loads(new_record.read_text())
    except (OSError, ValueError) as exc:
        raise HvdflowError(f"the rerun finished but its record {new_record} cannot be read: {exc}") from None
    comparison = compare(record, new, request.tolerance)
    report = {**comparison.to_json(), "recorded": str(request.record.resolve()), "rerun": str(new_record),
              "worktree": str(into), "commit": checkout.commit, "diff_applied": checkout.diff_applied,
              "note": checkout.note, "dataset": how, "user_code": restored}
    write_text_atomic(into / "rerun.json", json.dumps(report, indent=2, sort_keys=True) + "\n")
    sys.stdout.write(table(comparison))
    print(f"hvdflow rerun: comparison written to {into / 'rerun.json'}", flush=True)
    return comparison
