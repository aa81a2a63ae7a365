"""The pins a reproducible build checks: every Python file's sha256 (from PyPI's index), every Debian package's version.

``hvdflow image pin NAME`` writes both: ``--hash=sha256:...`` for every file PyPI holds of each pinned requirement
(so ``pip --require-hashes`` accepts whichever wheel fits, and nothing else), and the recipe's Debian manifest from
the root filesystem of a build (``hvdflow image build NAME --debian pin``). A build then refuses a file or a package
version that differs, naming it.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

from hvdflow.errors import ConfigError
from hvdflow.files.atomic import write_text_atomic
from hvdflow.images.build.commands import BuildError

PYPI_SIMPLE = "https://pypi.org/simple"
DEBIAN_MODES = ("check", "follow", "pin")
"""What a build does with the recipe's Debian manifest: ``check`` (fail, naming every package whose pinned version
the mirror no longer serves), ``follow`` (pin what is still served, take the mirror's version of the rest and say
which: the demo and the tests, which must build on any later day), ``pin`` (apt unpinned; write the manifest)."""
_NORMALISE = re.compile(r"[-_.]+")


def pypi_file_hashes(name: str, version: str, index: str = PYPI_SIMPLE) -> dict[str, str]:
    """``{filename: sha256}`` of every file ``index`` holds of ``name==version`` (PEP 691's JSON simple API)."""
    project = _NORMALISE.sub("-", name).lower()
    request = urllib.request.Request(f"{index}/{project}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            files = json.loads(response.read())["files"]
    except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
        raise BuildError(f"{index}/{project}/: cannot read the file list ({exc})") from None
    found = {f["filename"]: f["hashes"]["sha256"] for f in files
             if "sha256" in f.get("hashes", {}) and _version_of(f["filename"], name) == version
             and installs_on_linux_x86_64(f["filename"])}
    if not found:
        raise BuildError(f"{index} holds no file of {name}=={version}")
    return found


def installs_on_linux_x86_64(filename: str) -> bool:
    """Whether a file can install on Linux x86-64: an sdist, or a wheel for any platform or for that one."""
    if not filename.endswith(".whl"):
        return True
    platform = filename[:-4].split("-")[-1]
    return platform == "any" or all(tag.endswith("x86_64") and "linux" in tag for tag in platform.split("."))


def _version_of(filename: str, name: str) -> str | None:
    """The version in a wheel or sdist file name of project ``name``."""
    base = _NORMALISE.sub("_", name).lower()
    lowered = filename.lower()
    for suffix in (".tar.gz", ".zip", ".whl"):
        if lowered.endswith(suffix):
            stem = filename[: -len(suffix)]
            parts = stem.split("-")
            if _NORMALISE.sub("_", parts[0]).lower() == base and len(parts) >= 2:
                return parts[1]
    return None


def pin_requirement_hashes(requirements: Path, index: str = PYPI_SIMPLE) -> int:
    """Rewrite every ``name==version`` line of ``requirements`` with the sha256 of each file ``index`` holds of it
    for Linux x86-64 (pip-compile's layout, one ``--hash`` per line); comments stay. Returns how many were pinned."""
    lines, pinned = [], 0
    for line in requirements.read_text().replace("\\\n", " ").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            lines.append(line)
            continue
        requirement = line.split()[0]
        if "==" not in requirement:
            raise ConfigError(f"{requirements}: {line!r} is not pinned as name==version")
        name, version = requirement.split("==", 1)
        hashes = sorted(set(pypi_file_hashes(name.split("[")[0], version, index).values()))
        lines.append(" \\\n    ".join([requirement, *(f"--hash=sha256:{h}" for h in hashes)]))
        pinned += 1
    write_text_atomic(requirements, "\n".join(lines) + "\n")
    return pinned


def read_debian_manifest(path: Path) -> dict[str, str]:
    """``{package: version}`` from a Debian manifest (``package version`` per line, ``#`` comments)."""
    packages: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 2:
            raise ConfigError(f"{path}:{number}: {line!r} is not `package version`")
        packages[fields[0]] = fields[1]
    return packages


def write_debian_manifest(path: Path, packages: dict[str, str], suite: str) -> None:
    """Write ``packages`` as the recipe's Debian manifest."""
    header = (f"# Every Debian package of the image ({suite}) and its version: the build pins apt to them and fails,\n"
              "# naming the package, where the mirror serves another. Written by `hvdflow image build NAME --debian pin`.\n")
    write_text_atomic(path, header + "".join(f"{name} {packages[name]}\n" for name in sorted(packages)))


def apt_preferences(packages: dict[str, str]) -> str:
    """An apt preferences file that makes apt choose exactly these versions (priority 1001 allows a downgrade)."""
    return "".join(f"Package: {name}\nPin: version {version}\nPin-Priority: 1001\n\n"
                   for name, version in sorted(packages.items()))


def check_debian_packages(found: dict[str, str], pinned: dict[str, str], manifest: Path, follow: bool = False) -> str:
    """Raise BuildError naming every package whose installed version is not the one ``manifest`` pins; with
    ``follow``, return that message instead (empty when every version is the pinned one)."""
    problems = []
    for name in sorted(set(found) | set(pinned)):
        if name not in found:
            problems.append(f"{name} {pinned[name]} is pinned but was not installed")
        elif name not in pinned:
            problems.append(f"{name} {found[name]} was installed but is not pinned")
        elif found[name] != pinned[name]:
            problems.append(f"{name}: pinned {pinned[name]}, the mirror gave {found[name]} (the pinned version is "
                            "gone from it)")
    if not problems:
        return ""
    message = (f"the Debian packages differ from {manifest}: " + "; ".join(problems) + ". Debian's mirror has moved "
               "on: pin the new versions with `hvdflow image build NAME --debian pin` (a new image)")
    if not follow:
        raise BuildError(message)
    return message
