"""The documentation: the site builds with MkDocs' --strict (a broken link, a missing anchor or a page left out of the
nav fails), the configuration reference is the schema's, and the README stays short and free of measurement history.

The site's builder is a venv of requirements/docs.txt (every package pinned), made once from PyPI and kept in
~/.cache/hvdflow keyed by that file and the Python that runs it."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO

DOCS_REQUIREMENTS = REPO / "requirements" / "docs.txt"
README_MOST_LINES = 200
"""The README's length goal (issue 46: about 200 lines; everything else is in the site)."""


@pytest.fixture(scope="module")
def mkdocs() -> Path:
    """The pinned MkDocs with the Material theme, in a cached venv (made when missing or when the pins changed)."""
    key = hashlib.sha256(DOCS_REQUIREMENTS.read_bytes() + sys.version.encode()).hexdigest()[:16]
    venv = Path(os.environ.get("HVDFLOW_CACHE", Path.home() / ".cache" / "hvdflow")) / f"venv-docs-{key}"
    if not (venv / ".hvdflow-complete").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=300)
        proc = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-deps", "-r", str(DOCS_REQUIREMENTS)],
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        (venv / ".hvdflow-complete").touch()
    return venv / "bin" / "mkdocs"


def test_the_documentation_site_builds_strictly_with_every_page_in_its_nav(mkdocs: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    proc = subprocess.run([str(mkdocs), "build", "--strict", "--site-dir", str(site)], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert "WARNING" not in proc.stderr, proc.stderr[-6000:]
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]

    def pages(entries: list) -> list[str]:  # type: ignore[type-arg]
        found = []
        for entry in entries:
            (value,) = entry.values()
            found += pages(value) if isinstance(value, list) else [value]
        return found

    listed = pages(nav)
    written = sorted(str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md"))
    assert sorted(listed) == written, "pages and the nav differ"
    for page in listed:
        html = site / page.removesuffix(".md") / "index.html" if page != "index.md" else site / "index.html"
        assert html.is_file() and "<h1" in html.read_text(), page


def test_the_build_fails_on_a_broken_link_naming_it(mkdocs: Path, tmp_path: Path) -> None:
    # the check the site's test rests on, made real: a copy of the docs with one link to a page that does not exist
    copy = tmp_path / "copy"
    shutil.copytree(REPO / "docs", copy / "docs")
    (copy / "mkdocs.yml").write_text((REPO / "mkdocs.yml").read_text())
    page = copy / "docs" / "troubleshooting.md"
    page.write_text(page.read_text() + "\nSee [the missing page](tutorials/no-such-page.md).\n")
    proc = subprocess.run([str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=copy,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode != 0 and "tutorials/no-such-page.md" in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize("name", ["config", "profile"])
def test_each_reference_page_is_its_schemas(name: str) -> None:
    from hvdflow.config.reference import REFERENCES

    page = (REPO / "docs" / "reference" / f"{name}.md").read_text()
    assert page == REFERENCES[name].render(), (f"docs/reference/{name}.md differs from its schema: PYTHONPATH=src "
                                               f"python -m hvdflow.config.reference {name} > docs/reference/{name}.md")


def test_the_config_reference_holds_every_key_and_a_key_added_to_the_schema() -> None:
    from hvdflow.config.reference import REFERENCES, rows

    config = REFERENCES["config"]
    schema = config.schema()
    page = config.render()
    keys = [path for path, *_ in rows(schema)]
    for key in ("experiments.<name>.model.build", "datasets.<name>.source.read", "benchmark.user_models.<name>.code",
                "experiments.<name>.elastic.min_ranks", "catalog"):
        assert key in keys and f"| `{key}` |" in page, key
    schema["properties"]["experiments"]["additionalProperties"]["properties"]["new_key"] = {
        "type": "integer", "minimum": 2, "default": 3, "description": "A key a later change adds."}
    assert "| `experiments.<name>.new_key` | integer ≥ 2 | `3` | A key a later change adds. |" in config.render(schema)


def test_the_profile_accepts_exactly_the_schemas_keys_and_the_shipped_profiles_match_it(tmp_path: Path) -> None:
    import jsonschema

    from hvdflow.config.profile import load_profile
    from hvdflow.config.profile_schema import SCHEMA
    from hvdflow.errors import ConfigError

    top = set(SCHEMA["properties"])
    with pytest.raises(ConfigError, match=r"unknown key\(s\) colour; valid keys: (\w+, )+\w+$") as refused:
        bad = tmp_path / "hvdflow.yaml"
        bad.write_text("registry: none\nruntime: {kind: udocker}\nlauncher: gloo\ncolour: red\n")
        load_profile(bad)
    assert set(str(refused.value).split("valid keys: ")[1].split(", ")) == top
    # every shipped profile, its ${VARIABLE:-default}s taken at their defaults, is what the schema describes
    defaulted = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*:-([^}]*)\}")
    profiles = sorted((REPO / "profiles").glob("*/hvdflow.yaml"))
    assert len(profiles) >= 5
    for path in profiles:
        data = yaml.safe_load(defaulted.sub(lambda m: m.group(1), path.read_text()))
        errors = [e.message for e in jsonschema.Draft202012Validator(SCHEMA).iter_errors(data)]
        assert not errors, (path, errors)


def test_the_readme_is_short_and_holds_no_measurement_history() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MOST_LINES
    # measurement history (figures with their commits and dates) lives in docs/measurements.md
    assert not re.findall(r"`[0-9a-f]{7,40}`", readme), re.findall(r"`[0-9a-f]{7,40}`", readme)
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b", readme), re.findall(r"\b20\d\d-\d\d-\d\d\b", readme)
    for link in re.findall(r"\]\((docs/[^)#\s]+)", readme):
        assert (REPO / link).is_file(), link
