"""The shipped catalogue and recipes load, and bad ones are refused with the key at fault named."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from hvdflow.errors import ConfigError
from hvdflow.images.build.commands import BuildError
from hvdflow.images.build.pins import (
    apt_preferences,
    check_debian_packages,
    installs_on_linux_x86_64,
    pin_requirement_hashes,
    read_debian_manifest,
    write_debian_manifest,
)
from hvdflow.images.build.proot import fetch_source
from hvdflow.images.catalog import get_image, load_catalog
from hvdflow.images.recipe import load_recipe

CATALOG = REPO / "containers" / "catalog.yaml"


def test_shipped_catalog_and_recipes_are_consistent() -> None:
    catalog = load_catalog(CATALOG)
    assert {"hvdflow-cpu", "hvdflow-gpu"} <= set(catalog)
    for spec in catalog.values():
        if spec.recipe is None:  # a prebuilt image: pulled from its publisher's registry, never from the profile's
            assert spec.registry is not None and not spec.tested and spec.purposes == ("train",), spec.name
            continue
        recipe = load_recipe(spec.recipe)
        built = {recipe.horovod.framework: recipe.horovod.framework_version}
        assert (built.get("tensorflow", "none"), built.get("torch", "none")) == (spec.tensorflow, spec.torch), spec.name
        assert recipe.horovod.version == spec.horovod
    assert catalog["hvdflow-cpu-oldest"].purposes == ("train",)  # no preparation libraries
    cpu = catalog["hvdflow-cpu"]
    assert (cpu.device, cpu.tested, cpu.reference) == ("cpu", True, "hvdflow/hvdflow-cpu:tf2.15.1-hvd0.28.1-py3.11")
    assert catalog["hvdflow-gpu"].tested is False
    upstream = {name: (spec.registry, spec.reference) for name, spec in catalog.items() if spec.recipe is None}
    assert upstream == {"horovod-cpu": ("https://registry-1.docker.io", "horovod/horovod-cpu:0.28.1"),
                        "horovod-gpu": ("https://registry-1.docker.io", "horovod/horovod:0.28.1"),
                        "ngc-tensorflow": ("https://nvcr.io", "nvidia/tensorflow:24.03-tf2-py3")}


@pytest.mark.parametrize("fields, message", [
    ({"registry": "registry-1.docker.io"}, "images.x.registry: 'registry-1.docker.io' must be http://HOST[:PORT]"),
    ({"username": "$oauthtoken"}, "images.x: username and password_env go together"),
    ({"password_env": "NGC_API_KEY"}, "images.x: username and password_env go together"),
    ({"token": "abc"}, "unknown key(s) token"),
])
def test_bad_registry_fields_are_named(tmp_path: Path, fields: dict[str, str], message: str) -> None:
    entry = {"description": "d", "repository": "r/x", "tag": "1", "device": "cpu", "python": "3.8",
             "tensorflow": "2.9.2", "horovod": "0.28.1", "mpi": "none", "execmode": "P1", "purposes": ["train"],
             "tested": False, **fields}
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump({"images": {"x": entry}}))
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_catalog(path)


def test_cpu_requirements_are_a_full_pinned_closure() -> None:
    recipe = load_recipe(load_catalog(CATALOG)["hvdflow-cpu"].recipe)  # type: ignore[arg-type]
    lines = recipe.requirement_lines()
    assert all("==" in line for line in lines)
    names = {line.split("==")[0].lower() for line in lines}
    assert {"tensorflow-cpu", "numpy", "scikit-learn", "wheel", "psutil", "pyyaml", "cloudpickle"} <= names


def _catalog(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(body)
    return path


ENTRY = ("description: d, repository: a/b, tag: t1, device: cpu, python: '3.11', tensorflow: 2.15.1, "
         "horovod: 0.28.1, mpi: m, execmode: P1, purposes: [prepare, train], tested: true")


@pytest.mark.parametrize("entry, message", [
    (ENTRY + ", colour: red", "images.x: unknown key(s) colour; valid keys:"),
    (ENTRY.replace("tag: t1, ", ""), "images.x: missing required key(s) tag"),
    (ENTRY.replace("device: cpu", "device: tpu"), "images.x.device: 'tpu' must be cpu or gpu"),
    (ENTRY.replace("execmode: P1", "execmode: F3"), "images.x.execmode: 'F3' must be one of P1, P2, R1"),
    (ENTRY.replace("repository: a/b", "repository: A//b"), "images.x.repository: 'A//b' is not a valid repository"),
    (ENTRY.replace("tested: true", "tested: yes please"), "images.x.tested: expected bool"),
    (ENTRY + ", recipe: nowhere.yaml", "images.x.recipe:"),
    (ENTRY.replace("purposes: [prepare, train]", "purposes: [paint]"), "images.x.purposes: ['paint'] must be a non-empty"),
    (ENTRY.replace("purposes: [prepare, train]", "purposes: []"), "images.x.purposes: [] must be a non-empty"),
])
def test_bad_catalog_entries_name_the_key(tmp_path: Path, entry: str, message: str) -> None:
    path = _catalog(tmp_path, f"images:\n  x: {{{entry}}}\n")
    with pytest.raises(ConfigError) as err:
        load_catalog(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_unknown_image_lists_known_ones(tmp_path: Path) -> None:
    path = _catalog(tmp_path, f"images:\n  x: {{{ENTRY}}}\n  y: {{{ENTRY}}}\n")
    with pytest.raises(ConfigError, match=r"image 'z' is not in the catalogue .*; known images: x, y"):
        get_image(load_catalog(path), "z", path)


def test_not_yaml_and_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_catalog(_catalog(tmp_path, "images: [unclosed\n"))
    with pytest.raises(ConfigError, match="expected a mapping at the top level, got list"):
        load_catalog(_catalog(tmp_path, "- a\n- b\n"))


def _recipe(tmp_path: Path, requirements: str, tensorflow: str = "2.15.1") -> Path:
    """A copy of the hvdflow-cpu recipe (and the proot spec beside it, as in containers/) with these requirements."""
    shutil.copytree(REPO / "containers" / "proot", tmp_path / "proot")
    (tmp_path / "image").mkdir()
    (tmp_path / "image" / "requirements.txt").write_text(requirements)
    source = (REPO / "containers" / "hvdflow-cpu" / "recipe.yaml").read_text()
    path = tmp_path / "image" / "recipe.yaml"
    path.write_text(source.replace("tensorflow: 2.15.1", f"tensorflow: {tensorflow}"))
    return path


HASH = " --hash=sha256:" + "ab" * 32


def test_recipe_requires_exact_pins_with_their_hashes(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'numpy>=1.26' is not pinned as name==version"):
        load_recipe(_recipe(tmp_path, f"tensorflow-cpu==2.15.1{HASH}\nnumpy>=1.26{HASH}\n"))
    with pytest.raises(ConfigError, match=r"requirements.txt: numpy==1.26.4 needs its files' sha256 as --hash=sha256"):
        load_recipe(_recipe(tmp_path / "b", f"tensorflow-cpu==2.15.1{HASH}\nnumpy==1.26.4 --hash=md5:00\n"))
    # pip-compile's layout: one hash per continuation line
    recipe = load_recipe(_recipe(tmp_path / "c", f"# comment\ntensorflow-cpu==2.15.1 \\\n   {HASH} \\\n   {HASH}\n"))
    assert recipe.requirement_lines() == ["tensorflow-cpu==2.15.1"]


def test_python_bytecode_is_kept_unless_the_recipe_drops_it_and_another_value_is_named(tmp_path: Path) -> None:
    assert load_recipe(_recipe(tmp_path, f"tensorflow-cpu==2.15.1{HASH}\n")).python_bytecode == "keep"
    oldest = load_recipe(load_catalog(CATALOG)["hvdflow-cpu-oldest"].recipe)  # type: ignore[arg-type]
    assert (oldest.python_bytecode, oldest.suite) == ("drop", "bullseye")
    path = _recipe(tmp_path / "b", f"tensorflow-cpu==2.15.1{HASH}\n")
    path.write_text(path.read_text() + "python_bytecode: strip\n")
    with pytest.raises(ConfigError, match=r"python_bytecode: 'strip' is not one of keep, drop"):
        load_recipe(path)


def test_recipe_tensorflow_must_match_the_pin(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"horovod.tensorflow is 2.16.2 but .* pins TensorFlow 2.15.1"):
        load_recipe(_recipe(tmp_path, f"tensorflow-cpu==2.15.1{HASH}\n", tensorflow="2.16.2"))
    # a name as pip's resolver reports it (tensorflow_cpu) is the same project (PEP 503)
    assert load_recipe(_recipe(tmp_path / "b", f"tensorflow_cpu==2.16.2{HASH}\n", tensorflow="2.16.2")).horovod
    keras3 = load_recipe(load_catalog(CATALOG)["hvdflow-keras3-cpu"].recipe)  # type: ignore[arg-type]
    assert keras3.horovod is not None and keras3.horovod.tensorflow == "2.21.0"
    assert [p.name for p in keras3.horovod.patches] == ["horovod-no-xla-ops.patch"]


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("sha256: 2924", "sha256: 2x24"), r"sources\[0\].sha256: '2x24.*' is not a sha256"),
    (lambda t: t.replace("  - clone3.patch", "  - clone4.patch"), r"patches: .*clone4.patch does not exist"),
    (lambda t: t + "flags: -O3\n", r"unknown key\(s\) flags"),
])
def test_bad_proot_build_specs_are_named(tmp_path: Path, edit, message: str) -> None:  # type: ignore[no-untyped-def]
    recipe = _recipe(tmp_path, f"tensorflow-cpu==2.15.1{HASH}\n")
    spec = tmp_path / "proot" / "proot.yaml"
    spec.write_text(edit(spec.read_text()))
    with pytest.raises(ConfigError, match=message):
        load_recipe(recipe)


def test_a_proot_source_is_fetched_once_checked_and_a_missing_or_changed_one_named(tmp_path: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HVDFLOW_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "proot_5.4.0.orig.tar.gz"
    source.write_bytes(b"the source")
    sha = hashlib.sha256(b"the source").hexdigest()
    fetched = fetch_source(source.as_uri(), sha)
    assert fetched == tmp_path / "cache" / "sources" / sha / source.name and fetched.read_bytes() == b"the source"
    source.unlink()  # the mirror dropped it: the cached copy serves
    assert fetch_source(source.as_uri(), sha) == fetched
    with pytest.raises(BuildError, match=r"cannot download file://.*gone.tar.gz .* Debian's mirror drops old revisions"):
        fetch_source((tmp_path / "gone.tar.gz").as_uri(), "0" * 64)
    source.write_bytes(b"other bytes")
    with pytest.raises(BuildError, match=f"has sha256 {hashlib.sha256(b'other bytes').hexdigest()}, but .* pins {'1' * 64}"):
        fetch_source(source.as_uri(), "1" * 64)
    assert not list((tmp_path / "cache" / "sources" / ("1" * 64)).iterdir())  # nothing half-fetched is kept


def test_a_debian_package_the_mirror_no_longer_serves_is_named(tmp_path: Path) -> None:
    manifest = tmp_path / "debian-packages.txt"
    write_debian_manifest(manifest, {"netbase": "6.4", "libc6": "2.36-9+deb12u9"}, "bookworm")
    pinned = read_debian_manifest(manifest)
    assert pinned == {"libc6": "2.36-9+deb12u9", "netbase": "6.4"}
    assert "Package: libc6\nPin: version 2.36-9+deb12u9\nPin-Priority: 1001\n" in apt_preferences(pinned)
    check_debian_packages(dict(pinned), pinned, manifest)  # the same versions: no error
    with pytest.raises(BuildError) as moved:
        check_debian_packages({"libc6": "2.36-9+deb12u10", "netbase": "6.4", "procps": "2:4.0.2-3"}, pinned, manifest)
    message = str(moved.value)
    assert "libc6: pinned 2.36-9+deb12u9, the mirror gave 2.36-9+deb12u10 (the pinned version is gone from it)" in message
    assert "procps 2:4.0.2-3 was installed but is not pinned" in message and str(manifest) in message
    assert "netbase" not in message
    manifest.write_text("libc6\n")
    with pytest.raises(ConfigError, match=r"debian-packages.txt:1: 'libc6' is not `package version`"):
        read_debian_manifest(manifest)


def test_only_files_that_install_on_linux_x86_64_are_pinned() -> None:
    assert installs_on_linux_x86_64("numpy-1.26.4.tar.gz") and installs_on_linux_x86_64("six-1.17.0-py2.py3-none-any.whl")
    assert installs_on_linux_x86_64("numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
    assert not installs_on_linux_x86_64("numpy-1.26.4-cp311-cp311-macosx_11_0_arm64.whl")
    assert not installs_on_linux_x86_64("numpy-1.26.4-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl")
    assert not installs_on_linux_x86_64("numpy-1.26.4-cp311-cp311-win_amd64.whl")


def test_image_pin_writes_the_sha256_of_pypis_files_and_the_recipe_loads(tmp_path: Path) -> None:
    # PyPI's files never change, so the hashes of six 1.17.0 are known; the recipe then passes load_recipe's check
    path = _recipe(tmp_path, "# the image's packages\ntensorflow-cpu==2.15.1\nsix==1.17.0\n")
    requirements = path.parent / "requirements.txt"
    assert pin_requirement_hashes(requirements) == 2
    text = requirements.read_text()
    assert text.startswith("# the image's packages\ntensorflow-cpu==2.15.1 \\\n    --hash=sha256:")
    assert ("six==1.17.0 \\\n    --hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274 \\\n"
            "    --hash=sha256:ff70335d468e7eb6ec65b95b99d3a2836546063f63acc5171de367e834932a81\n") in text
    assert "macosx" not in text and load_recipe(path).requirement_lines() == ["tensorflow-cpu==2.15.1", "six==1.17.0"]
    assert pin_requirement_hashes(requirements) == 2 and requirements.read_text() == text, "pinning again changes nothing"


def _base_edit(path: Path, base: str) -> Path:
    """The recipe at ``path`` with these lines added under ``base:``."""
    path.write_text(path.read_text().replace("base:\n", "base:\n" + base, 1))
    return path


def test_debian_components_are_main_unless_the_recipe_names_more_and_bad_ones_are_named(tmp_path: Path) -> None:
    recipe = load_recipe(_recipe(tmp_path, f"tensorflow-cpu==2.15.1{HASH}\n"))
    assert (recipe.components, recipe.debconf) == (("main",), ())
    wider = load_recipe(_base_edit(_recipe(tmp_path / "b", f"tensorflow-cpu==2.15.1{HASH}\n"),
                                   "  components: [main, contrib, non-free]\n"))
    assert wider.components == ("main", "contrib", "non-free")
    for components, message in (("[main, nonfree]", r"'nonfree' is not a component of Debian's archive \(main, contrib"),
                                 ("[contrib]", r"\['contrib'\] lacks main"),
                                 ("[main, contrib, main]", r"names a component twice"),
                                 ("main", r"expected list, got 'main'")):
        path = _base_edit(_recipe(tmp_path / components, f"tensorflow-cpu==2.15.1{HASH}\n"),
                          f"  components: {components}\n")
        with pytest.raises(ConfigError, match=r"recipe.yaml: base.components.*" + message):
            load_recipe(path)


def test_debconf_answers_are_checked(tmp_path: Path) -> None:
    line = "nvidia-cudnn nvidia-cudnn/question select I Decline"
    recipe = load_recipe(_base_edit(_recipe(tmp_path, f"tensorflow-cpu==2.15.1{HASH}\n"), f"  debconf: ['{line}']\n"))
    assert recipe.debconf == (line,)
    for bad in ("nvidia-cudnn I Decline", "nvidia-cudnn nvidia-cudnn/question choose I Decline"):
        path = _base_edit(_recipe(tmp_path / bad.replace(" ", "_"), f"tensorflow-cpu==2.15.1{HASH}\n"),
                          f"  debconf: ['{bad}']\n")
        with pytest.raises(ConfigError, match=r"base.debconf\[0\]: .* is not a debconf answer `package question type"):
            load_recipe(path)


def test_mmdebstrap_names_components_and_debconf_answers_only_where_a_recipe_has_them(tmp_path: Path) -> None:
    from hvdflow.images.build.rootfs import mmdebstrap_argv
    from hvdflow.images.build.rootless import mmdebstrap_mode
    from hvdflow.images.build.toolchain import build_root_argv

    cpu = load_recipe(load_catalog(CATALOG)["hvdflow-cpu"].recipe)  # type: ignore[arg-type]
    # a main-only recipe: the command it always had (and so the same image digest)
    assert mmdebstrap_argv(cpu, tmp_path / "root", "/p.pref") == [
        "mmdebstrap", *mmdebstrap_mode(), "--variant=minbase",
        "--include=python3,python3-pip,ca-certificates,libopenmpi3,openmpi-bin,netbase,procps",
        '--setup-hook=mkdir -p "$1"/etc/apt/preferences.d && cp /p.pref "$1"/etc/apt/preferences.d/hvdflow-pins',
        '--customize-hook=rm -f "$1"/etc/apt/preferences.d/hvdflow-pins "$1"/etc/resolv.conf "$1"/etc/hostname',
        "bookworm", str(tmp_path / "root")]
    oldest = load_recipe(load_catalog(CATALOG)["hvdflow-cpu-oldest"].recipe)  # type: ignore[arg-type]
    assert not [a for a in build_root_argv(oldest, tmp_path) if a.startswith(("--components", "--essential-hook"))]
    gpu = load_recipe(load_catalog(CATALOG)["hvdflow-torch-gpu"].recipe)  # type: ignore[arg-type]
    hook = ("--essential-hook=echo 'nvidia-cudnn nvidia-cudnn/question select I Decline' | chroot \"$1\" "
            "debconf-set-selections")
    for argv in (mmdebstrap_argv(gpu, tmp_path / "root", "/p.pref"), build_root_argv(gpu, tmp_path / "root")):
        assert argv[:2 + len(mmdebstrap_mode())][-1] == "--variant=minbase"
        assert "--components=main,contrib,non-free" in argv and hook in argv
        assert argv.index(hook) < next(i for i, a in enumerate(argv) if a.startswith("--include="))


def test_debians_cuda_torch_is_debians_torch(tmp_path: Path) -> None:
    from hvdflow.images.build.rootfs import horovod_check

    gpu = load_recipe(load_catalog(CATALOG)["hvdflow-torch-gpu"].recipe)  # type: ignore[arg-type]
    assert gpu.horovod is not None and gpu.horovod.framework_version == "2.6.0"
    assert gpu.horovod.patches[0].resolve() == REPO / "containers" / "hvdflow-torch-cpu" / "horovod-cxx17.patch"
    assert "assert hvd.gloo_built()" in horovod_check(gpu) and "assert hvd.nccl_built()" in horovod_check(gpu)
    cpu = load_recipe(load_catalog(CATALOG)["hvdflow-torch-cpu"].recipe)  # type: ignore[arg-type]
    assert "nccl_built" not in horovod_check(cpu)
    shutil.copytree(REPO / "containers", tmp_path / "containers")
    recipe = tmp_path / "containers" / "hvdflow-torch-gpu" / "recipe.yaml"
    manifest = recipe.parent / "debian-packages.txt"
    manifest.write_text("python3 3.13.5-1\npython3-torch-cuda 2.6.0+dfsg-7+b1\n")
    assert load_recipe(recipe).horovod.framework_version == "2.6.0"  # type: ignore[union-attr]
    manifest.write_text("python3-torch-cuda 2.7.1+dfsg-1\n")
    with pytest.raises(ConfigError, match=r"horovod.torch is 2.6.0 but .* pins python3-torch-cuda 2.7.1\+dfsg-1"):
        load_recipe(recipe)
    manifest.write_text("python3 3.13.5-1\n")
    with pytest.raises(ConfigError, match=r"has no python3-torch or python3-torch-cuda"):
        load_recipe(recipe)
