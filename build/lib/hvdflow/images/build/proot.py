"""The proot an image carries: built once from Debian's pinned source with its seccomp acceleration kept.

Debian's proot package turns the acceleration off, so every system call of a container (each futex and socket call
of the Gloo ranks) stops in ptrace; with it, only the calls proot must rewrite (those taking paths) do. The build:
fetch the sources named in ``containers/proot/proot.yaml`` (cached by sha256 under the hvdflow cache; a source the
mirror no longer has is an error naming it unless cached), apply Debian's patches less the one that disables the
acceleration, then ours, link statically (a login node needs nothing installed), strip, and check that a program it
runs is under a seccomp filter. The binary is cached, keyed by the spec, our patches and this file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from hvdflow.files.cache import cache_root, content_key, sha256_file, source_fingerprint
from hvdflow.images.build.commands import BuildError, run_step
from hvdflow.images.build.toolchain import debian_package_version
from hvdflow.images.build.wheels import PREFIX_MAP_TARGET
from hvdflow.images.recipe import ProotBuild

SECCOMP_ON = "Seccomp:\t2"
"""What ``/proc/self/status`` says of a process under a seccomp filter (mode 2): proot's acceleration is on."""


def fetch_source(url: str, sha256: str) -> Path:
    """The file at ``url``, downloaded once into the cache and checked against ``sha256``."""
    final = cache_root() / "sources" / sha256 / url.rsplit("/", 1)[-1]
    if final.is_file() and sha256_file(final) == sha256:
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.{os.getpid()}")
    try:
        with urllib.request.urlopen(url, timeout=120) as response, open(tmp, "wb") as out:
            shutil.copyfileobj(response, out)
    except (urllib.error.URLError, OSError) as exc:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"cannot download {url} ({exc}) and it is not in {final.parent}: Debian's mirror drops old "
                         "revisions; put the file there or update containers/proot/proot.yaml") from None
    got = sha256_file(tmp)
    if got != sha256:
        tmp.unlink()
        raise BuildError(f"{url} has sha256 {got}, but containers/proot/proot.yaml pins {sha256}")
    os.replace(tmp, final)
    return final


def proot_key(build: ProotBuild) -> str:
    """The cache key of the binary: the spec, our patches, this builder, and the libtalloc it links."""
    return content_key(build.fingerprint(), source_fingerprint(Path(__file__)),
                       debian_package_version("libtalloc-dev"))[:16]


def ensure_proot(build: ProotBuild, log: Path) -> Path:
    """The static, seccomp-accelerated proot of ``build``, built unless the cache holds it."""
    final = cache_root() / "proot" / f"proot-{build.version}-{proot_key(build)}" / "proot"
    if final.is_file():
        return final
    for package in build.build_apt_packages:
        debian_package_version(package)  # a BuildError naming the package if it is missing
    sources = [fetch_source(url, sha) for url, sha in build.sources]
    final.parent.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=final.parent.parent, prefix=".build-"))
    try:
        tree = _unpack(sources, work, log)
        _patch(build, tree, log)
        # the random build directory renamed in what the compiler records (debug info, hence the build id that
        # survives the strip), so that the same sources give the same binary
        run_step(["make", "-C", "src", "proot", "LDFLAGS=-static -Wl,-z,noexecstack -ltalloc"], log, cwd=tree,
                 env=dict(os.environ, MAKEFLAGS=f"-j{os.cpu_count() or 1}",
                          CFLAGS=f"-ffile-prefix-map={work}={PREFIX_MAP_TARGET}"))
        binary = tree / "src" / "proot"
        run_step(["strip", str(binary)], log)
        check_seccomp(binary)
        done = work / "done"
        done.mkdir()
        shutil.copy2(binary, done / "proot")
        if final.parent.exists():
            shutil.rmtree(final.parent)
        os.replace(done, final.parent)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def _unpack(sources: list[Path], work: Path, log: Path) -> Path:
    """Unpack the upstream tarball and Debian's ``debian/`` beside it; return the source tree."""
    for source in sources:
        run_step(["tar", "-xf", str(source), "-C", str(work), "--no-same-owner"], log)
    trees = [p for p in work.iterdir() if p.is_dir() and (p / "src" / "GNUmakefile").is_file()]
    if len(trees) != 1 or not (work / "debian" / "patches" / "series").is_file():
        raise BuildError(f"the proot sources unpacked in {work} hold no single source tree with debian/patches/series")
    return trees[0]


def _patch(build: ProotBuild, tree: Path, log: Path) -> None:
    """Apply Debian's patch series less the dropped ones, then ours."""
    patches = tree.parent / "debian" / "patches"
    series = [line.split()[0] for line in (patches / "series").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    missing = [name for name in build.drop_debian_patches if name not in series]
    if missing:
        raise BuildError(f"{build.path}: drop_debian_patches: {', '.join(missing)} not in Debian's series "
                         f"({', '.join(series)}); check what the new revision changed")
    for name in series:
        if name not in build.drop_debian_patches:
            run_step(["patch", "-p1", "--forward", "-i", str(patches / name)], log, cwd=tree)
    for patch in build.patches:
        run_step(["patch", "-p1", "--forward", "-i", str(patch.resolve())], log, cwd=tree)


def check_seccomp(proot: Path) -> None:
    """BuildError unless a program run by ``proot`` is under its seccomp filter (the acceleration is on)."""
    proc = subprocess.run([str(proot), "-r", "/", "/bin/cat", "/proc/self/status"], capture_output=True, text=True,
                          timeout=60)
    if proc.returncode != 0 or SECCOMP_ON not in proc.stdout:
        seen = [line for line in proc.stdout.splitlines() if line.startswith("Seccomp")]
        raise BuildError(f"{proot} runs programs without its seccomp acceleration ({seen or proc.stderr.strip()}); "
                         "the kernel or the build refused it")
