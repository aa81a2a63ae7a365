"""Registry authentication as Docker's clients do it: answer a 401's challenge, with a bearer token or basic credentials.

Docker Hub, nvcr.io and most registries answer an unauthenticated request with ``401`` and
``WWW-Authenticate: Bearer realm="...",service="...",scope="repository:NAME:pull"``. The client asks the realm (the
token service) for a token for that service and scope, anonymously or with basic credentials, and repeats the request
with ``Authorization: Bearer <token>``. Some registries ask for basic credentials directly (``Basic realm=...``).
The authorization header is never passed on across a redirect (blob downloads are redirected to storage that has
its own signature in the URL).
"""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.client import HTTPResponse
from typing import Optional

from hvdflow.errors import RegistryError

_PARAM = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class Credentials:
    """A registry user and password (the password is kept out of every repr and message)."""

    username: str
    password: str = field(repr=False)

    def basic(self) -> str:
        """The value of a basic ``Authorization`` header."""
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``(scheme, parameters)`` of a ``WWW-Authenticate`` header, the scheme lower-case."""
    scheme, _, rest = header.strip().partition(" ")
    return scheme.lower(), dict(_PARAM.findall(rest))


def _who(credentials: Optional[Credentials]) -> str:
    return f"as user {credentials.username}" if credentials else "anonymously"


def fetch_token(challenge: dict[str, str], credentials: Optional[Credentials], registry_url: str,
                timeout: float) -> str:
    """A bearer token from the challenge's realm for its service and scope."""
    realm = challenge.get("realm")
    if not realm:
        raise RegistryError(f"registry {registry_url} asked for a bearer token without naming a token service")
    query = urllib.parse.urlencode({k: v for k, v in challenge.items() if k in ("service", "scope")})
    request = urllib.request.Request(f"{realm}?{query}" if query else realm)
    if credentials is not None:
        request.add_unredirected_header("Authorization", credentials.basic())
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace").strip()[:300]
        raise RegistryError(f"the token service {realm} of registry {registry_url} refused a token {_who(credentials)} "
                            f"(HTTP {exc.code}: {detail})") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise RegistryError(f"the token service {realm} of registry {registry_url} gave no token: "
                            f"{getattr(exc, 'reason', exc)}") from None
    token = answer.get("token") or answer.get("access_token")
    if not token:
        raise RegistryError(f"the token service {realm} of registry {registry_url} answered without a token")
    return str(token)


def open_authorized(url: str, headers: dict[str, str], registry_url: str, credentials: Optional[Credentials],
                    timeout: float) -> HTTPResponse:
    """GET ``url`` of ``registry_url``, answering one authentication challenge; HTTPError for other failures.

    A request still refused after the challenge is a RegistryError that says who asked and what the registry said.
    """
    request = urllib.request.Request(url, headers=headers)
    try:
        return urllib.request.urlopen(request, timeout=timeout)  # type: ignore[no-any-return]
    except urllib.error.HTTPError as exc:
        if exc.code != 401:
            raise
        scheme, challenge = parse_challenge(exc.headers.get("WWW-Authenticate", ""))
    if scheme == "bearer":
        authorization = "Bearer " + fetch_token(challenge, credentials, registry_url, timeout)
    elif scheme == "basic" and credentials is not None:
        authorization = credentials.basic()
    else:
        raise RegistryError(f"registry {registry_url} needs credentials for {url} ({scheme or 'no'} authentication): "
                            "give the image's catalogue entry username and password_env")
    retry = urllib.request.Request(url, headers=headers)
    retry.add_unredirected_header("Authorization", authorization)
    try:
        return urllib.request.urlopen(retry, timeout=timeout)  # type: ignore[no-any-return]
    except urllib.error.HTTPError as exc:
        if exc.code not in (401, 403):
            raise
        detail = exc.read().decode(errors="replace").strip()[:300]
        hint = "" if credentials else "; a private image needs username and password_env in its catalogue entry"
        raise RegistryError(f"registry {registry_url} refused {url} {_who(credentials)} "
                            f"(HTTP {exc.code}: {detail}){hint}") from None
