"""Images from registries that authenticate as Docker Hub and nvcr.io do (bearer tokens), anonymously or as a user:
a loopback registry behind a token service (hvdflow.testbed.token_registry) serving the test registry's storage."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from conftest import HpcUser, Registry, TinyRepo
from hvdflow.testbed.token_registry import TokenRegistry, token_registry
from test_pull import _containers, _pull

PASSWORD = "s3cret-for-tests"


@pytest.fixture
def hub(registry: Registry, tmp_path: Path) -> Iterator[TokenRegistry]:
    """The token-authenticated registry: user ``site``; repositories ``test/private-*`` closed to anonymous users."""
    with token_registry(tmp_path / "hub", registry.storage, users={"site": PASSWORD}, private=("test/private-",)) as hub:
        yield hub


def _entry(catalog: Path, **fields: str) -> Path:
    """The catalogue with ``fields`` added to its entry ``tiny``."""
    data = yaml.safe_load(catalog.read_text())
    data["images"]["tiny"].update(fields)
    catalog.write_text(yaml.safe_dump(data))
    return catalog


def test_an_image_from_its_own_registry_is_pulled_there_with_an_anonymous_token(
        hpc_user: HpcUser, tiny_repo: TinyRepo, user_tmp: Path, hub: TokenRegistry) -> None:
    image = tiny_repo.push("1.0")
    catalog = _entry(tiny_repo.catalog(hpc_user, "1.0"), registry=hub.url)
    # the profile's registry (--registry) serves the same image without authentication: the entry's must win
    proc = _pull(hpc_user, catalog, tiny_repo.registry.url, user_tmp / "udocker")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["registry"] == hub.url and record["digest"] == image.manifest_digest
    scope = f"repository:{tiny_repo.repository}:pull"
    assert hub.service.issued.count((None, scope, ["pull"])) >= 2  # hvdflow's resolve, then udocker's pull


def test_a_private_image_needs_its_users_password_which_is_never_kept(
        hpc_user: HpcUser, registry: Registry, build_log: Path, tmp_path: Path, user_tmp: Path,
        hub: TokenRegistry) -> None:
    repo = TinyRepo(registry, build_log, tmp_path, f"test/private-{uuid.uuid4().hex[:8]}")
    image = repo.push("1.0")
    udocker_dir = user_tmp / "udocker"
    catalog = _entry(repo.catalog(hpc_user, "1.0"), registry=hub.url)
    anonymous = _pull(hpc_user, catalog, hub.url, udocker_dir)
    assert anonymous.returncode != 0
    assert f"registry {hub.url} refused" in anonymous.stderr and "anonymously" in anonymous.stderr
    assert "needs username and password_env in its catalogue entry" in anonymous.stderr
    _entry(catalog, username="site", password_env="HVDFLOW_TEST_REGISTRY_PASSWORD")
    unset = _pull(hpc_user, catalog, hub.url, udocker_dir)
    assert unset.returncode != 0
    assert ("images.tiny.password_env: the environment variable HVDFLOW_TEST_REGISTRY_PASSWORD (the password of "
            f"user site at {hub.url}) is not set") in unset.stderr
    wrong = _pull(hpc_user, catalog, hub.url, udocker_dir, env={"HVDFLOW_TEST_REGISTRY_PASSWORD": "wrong"})
    assert wrong.returncode != 0
    assert "refused a token as user site (HTTP 401: " in wrong.stderr and "incorrect username or password" in wrong.stderr
    assert "wrong" not in wrong.stderr.replace("incorrect username", "")
    right = _pull(hpc_user, catalog, hub.url, udocker_dir, env={"HVDFLOW_TEST_REGISTRY_PASSWORD": PASSWORD})
    assert right.returncode == 0, right.stderr
    record = json.loads(right.stdout)
    assert record["digest"] == image.manifest_digest
    assert hub.service.issued.count(("site", f"repository:{repo.repository}:pull", ["pull"])) >= 2  # both logged in
    assert _containers(hpc_user, udocker_dir) == [record["container"]]  # the refused pulls left nothing
    # udocker was logged in for the pull only: no file of the user's udocker directory holds the password
    leaks = [p for p in udocker_dir.rglob("*") if p.is_file() and not p.is_symlink() and p.stat().st_size < 10 ** 6
             and PASSWORD.encode() in p.read_bytes()]
    assert leaks == [] and PASSWORD not in right.stdout + right.stderr
