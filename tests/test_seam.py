"""The seam and the floors: the host never imports TensorFlow, Horovod or the trainer; the trainer never imports the
host; what both share are the standard-library packages ``hvdflow_index`` (the dataset index),
``hvdflow_runstate`` (the checkpoint manifest) and ``hvdflow_wire`` (the files between processes); no host module
imports a floor above its own.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

SRC = REPO / "src"
FRAMEWORKS = ("tensorflow", "horovod", "keras")
# the host's floors, bottom up: a module may import its own floor and the floors below
FLOORS = {"errors": 0, "code_location": 0, "files": 0, "images": 1, "config": 2, "launch": 3, "slurm": 4,
          "pipeline": 5, "rerun": 6, "doctor": 6, "cli": 7, "__main__": 7, "__init__": 0}
TESTBED_MAY_IMPORT = {"errors", "files", "testbed"}


def _imports(path: Path) -> set[str]:
    """The absolute module names a file imports (relative imports resolved against its package)."""
    package = ".".join(path.relative_to(SRC).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


ROOMS = {p.stem if p.is_file() else p.name for p in (SRC / "hvdflow").iterdir() if p.suffix == ".py" or p.is_dir()}


def _room(module: str) -> str:
    """The room (subpackage or top-level module) of an hvdflow module name; names of the package itself: __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ROOMS else "__init__"


HOST_FILES = sorted((SRC / "hvdflow").rglob("*.py"))
SHARED = ("hvdflow_index", "hvdflow_runstate", "hvdflow_wire")
CONTAINER_FILES = sorted([*(SRC / "hvdflow_trainer").rglob("*.py"), *(f for name in SHARED for f in (SRC / name).rglob("*.py"))])


def _fresh_import(code: str) -> list[str]:
    """Run ``code`` in a fresh interpreter with src/ first on the path; the framework modules it loaded."""
    probe = (f"import sys; sys.path.insert(0, {str(SRC)!r})\n{code}\n"
             f"print('\\n'.join(sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS + ('hvdflow_trainer',)!r})))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_importing_every_host_module_loads_no_framework_and_no_trainer() -> None:
    code = ("import importlib, pkgutil, hvdflow\n"
            "names = [m.name for m in pkgutil.walk_packages(hvdflow.__path__, 'hvdflow.') if m.name != 'hvdflow.__main__']\n"
            "assert len(names) > 30, names\n"
            "for name in names: importlib.import_module(name)\n"
            "import hvdflow_index, hvdflow_runstate, hvdflow_wire")
    assert _fresh_import(code) == []


def test_a_ranks_mode_chooser_imports_no_module_it_can_start_without() -> None:
    # every R1 or auto rank starts python -S -m hvdflow.images.execmode_choice before its udocker: these modules
    # cost it 20 ms (measured 2026-11-28); the chooser must not bring them back
    costly = ("dataclasses", "pathlib", "shutil", "subprocess", "platform", "typing", "inspect")
    proc = subprocess.run([sys.executable, "-S", "-c", "import sys, hvdflow.images.execmode_choice; "
                           f"print(' '.join(m for m in {costly!r} if m in sys.modules))"],
                          capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(SRC)})
    assert (proc.returncode, proc.stdout.split()) == (0, []), proc.stderr


@pytest.mark.parametrize("package", SHARED)
def test_the_shared_packages_load_no_framework_and_not_even_numpy(package: str) -> None:
    assert _fresh_import(f"import {package}\nassert 'numpy' not in sys.modules, sorted(sys.modules)") == []


@pytest.mark.parametrize("path", HOST_FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_host_modules_import_only_their_floor_and_below(path: Path) -> None:
    room = _room(".".join(path.relative_to(SRC).with_suffix("").parts))
    imported = {name for name in _imports(path) if name.split(".")[0] in ("hvdflow", "hvdflow_trainer") + FRAMEWORKS}
    assert not {n for n in imported if n.split(".")[0] != "hvdflow"}, f"{path} crosses the seam: {sorted(imported)}"
    rooms = {_room(name) for name in imported if name.startswith("hvdflow.")}
    if room == "testbed":
        assert rooms <= TESTBED_MAY_IMPORT, f"{path} imports {sorted(rooms - TESTBED_MAY_IMPORT)}"
        return
    assert "testbed" not in rooms or room == "cli", f"{path} imports the test bed"
    above = {r for r in rooms - {"testbed"} if FLOORS.get(r, 99) > FLOORS[room]}
    assert not above, f"{path} (floor {FLOORS[room]}) imports the floor above: {sorted(above)}"


@pytest.mark.parametrize("path", CONTAINER_FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_container_code_never_imports_the_host(path: Path) -> None:
    imported = {name.split(".")[0] for name in _imports(path)}
    assert "hvdflow" not in imported, f"{path} imports the host package"
    if any(path.is_relative_to(SRC / name) for name in SHARED):
        assert not imported & {"hvdflow_trainer", *FRAMEWORKS}, f"{path} must need only the standard library"


WIRE_FILES = sorted((SRC / "hvdflow_wire").rglob("*.py"))


@pytest.mark.parametrize("path", WIRE_FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_the_wire_imports_only_the_standard_library(path: Path) -> None:
    outside = {name.split(".")[0] for name in _imports(path)} - set(sys.stdlib_module_names) - {"hvdflow_wire"}
    assert not outside, f"{path} imports {sorted(outside)}: the files between processes need the standard library only"


def test_every_module_of_the_wire_loads_neither_side_of_the_seam() -> None:
    code = ("import importlib, pkgutil, hvdflow_wire\n"
            "for m in pkgutil.walk_packages(hvdflow_wire.__path__, 'hvdflow_wire.'): importlib.import_module(m.name)\n"
            "assert not [m for m in sys.modules if m.split('.')[0] in ('hvdflow', 'hvdflow_index', 'hvdflow_runstate', "
            "'numpy')], sorted(sys.modules)")
    assert _fresh_import(code) == []


def test_every_room_says_what_it_owns() -> None:
    rooms = sorted(p.parent for p in (SRC / "hvdflow").glob("*/__init__.py"))
    assert {r.name for r in rooms} >= {"files", "config", "images", "launch", "slurm", "pipeline", "testbed"}
    for room in rooms:
        doc = ast.get_docstring(ast.parse((room / "__init__.py").read_text()))
        assert doc and "import" in doc.lower(), f"{room}/__init__.py must say what the room owns and what it may import"
