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
FLOORS = {"errors": 0, "code_location": 0, "findings": 0, "text_table": 0, "files": 0, "images": 1, "runtime": 2,
          "config": 3, "launch": 4, "slurm": 5, "pipeline": 6, "rerun": 7, "doctor": 7, "site": 7, "cli": 8, "__main__": 8,
          "__init__": 0}
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


TRAINER = SRC / "hvdflow_trainer"
FRAMEWORK_FOLDERS = sorted(p.name for p in TRAINER.iterdir() if p.is_dir() and list(p.glob("*.py"))
                           and p.name != "sources")
"""The trainer's subpackages that are frameworks' folders (``sources`` holds the datasets' readers)."""


def test_the_trainers_framework_folders_are_the_registrys() -> None:
    """Each framework of the trainer's registry is a folder with the modules the entry points reach, and each folder
    is a framework's."""
    sys.path.insert(0, str(SRC))
    try:
        from hvdflow_trainer.frameworks import FRAMEWORKS
    finally:
        sys.path.remove(str(SRC))
    assert sorted(f.folder for f in FRAMEWORKS.values()) == FRAMEWORK_FOLDERS
    for framework in FRAMEWORKS.values():
        for module in ("fit", "script", "models", "evaluate", "benchmark"):
            assert (TRAINER / framework.folder / f"{module}.py").is_file(), (framework.folder, module)


@pytest.mark.parametrize("path", sorted(TRAINER.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_the_trainers_neutral_modules_reach_a_framework_only_through_its_registry(path: Path) -> None:
    """The framework-neutral modules (the package's root, its sources) import no framework folder, even lazily:
    ``frameworks.module_of`` is the one door; a framework folder imports no sibling's."""
    folders = {name for name in _imports(path) if name.split(".")[:2][-1] in FRAMEWORK_FOLDERS
               and name.startswith("hvdflow_trainer.")}
    own = path.relative_to(TRAINER).parts[0] if len(path.relative_to(TRAINER).parts) > 1 else None
    reached = {name.split(".")[1] for name in folders} - {own}
    assert not reached, f"{path} imports the framework folder(s) {sorted(reached)}: go through frameworks.module_of"


def _module_names() -> dict[str, Path]:
    """Every module of the packages under src/, by its dotted name (a package by its own name)."""
    names = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _import_graph() -> dict[str, set[str]]:
    """Module -> the modules of src/ it imports (anywhere in it, lazily too), parents' ``__init__`` left out."""
    names = _module_names()
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        edges = set()
        for imported in _imports(path):
            parts = imported.split(".")
            target = next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in names), None)
            if target and target != name and not name.startswith(target + ".") and names[target].name != "__init__.py":
                edges.add(target)
        graph[name] = edges
    return graph


def test_no_package_has_an_import_circle() -> None:
    """No module reaches itself again through the modules it imports (lazy imports included): each package is a stack
    of floors, the lower never calling back up."""
    graph, circles, state = _import_graph(), [], {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = "open"
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                circles.append(" -> ".join(trail[trail.index(target):] + [target]))
            elif target not in state:
                visit(target, trail + [target])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not circles, "import circles:\n" + "\n".join(circles)


LONGEST_FUNCTION = 60
LONG_KEPT = {("hvdflow/images/build/wheels.py", "ensure_horovod_wheel"):
             "63 lines; the builder's own source is in the images' cache key, so splitting it rebuilds both images: left "
             "for a change that rebuilds them anyway"}


def test_no_function_is_longer_than_a_screen() -> None:
    long = [f"{path.relative_to(SRC)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in sorted(SRC.rglob("*.py")) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (node.end_lineno or node.lineno) - node.lineno + 1 > LONGEST_FUNCTION
            and (str(path.relative_to(SRC)), node.name) not in LONG_KEPT]
    assert not long, f"functions over {LONGEST_FUNCTION} lines: " + ", ".join(long)


def test_the_names_both_sides_spell_are_the_schemas_and_the_trainers_registrys() -> None:
    """The built-in models, frameworks and distributed modes are spelled once (``hvdflow_wire.names``); the config's
    schema lists the same for the user, and the trainer's registry has a folder for each framework."""
    import yaml

    sys.path.insert(0, str(SRC))
    try:
        from hvdflow_trainer.frameworks import DISTRIBUTED, FRAMEWORKS
        from hvdflow_wire import names
    finally:
        sys.path.remove(str(SRC))
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    experiment = schema["properties"]["experiments"]["additionalProperties"]["properties"]
    assert tuple(experiment["model"]["then"]["enum"]) == names.BUILT_IN_MODELS
    assert tuple(experiment["framework"]["enum"]) == names.FRAMEWORKS == tuple(FRAMEWORKS)
    assert tuple(experiment["distributed"]["enum"]) == names.DISTRIBUTED == DISTRIBUTED
