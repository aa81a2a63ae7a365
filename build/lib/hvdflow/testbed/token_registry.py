"""A registry with token authentication on loopback, as Docker Hub and nvcr.io have, for tests.

Debian's ``docker-registry`` serves an existing storage folder (the test registry's) and accepts only JWTs signed by a
small token service that runs in a thread of the caller: the service signs with a throw-away RSA key (``openssl``)
whose self-signed certificate is both the registry's root bundle and the token's ``x5c`` chain. Anonymous requests get
pull access to every repository except the private ones; a user with the right password gets pull (and push)
access to all; a wrong password is refused with 401. Every token request is logged in :attr:`TokenService.issued`.
"""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time
import urllib.parse
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator, Optional

from hvdflow.testbed.registry_server import REGISTRY_BIN, free_port, wait_ready

SERVICE = "hvdflow-test-registry"
ISSUER = "hvdflow-test-token-service"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class TokenService:
    """Issues registry tokens signed with ``key`` (PEM), naming ``cert`` (PEM) in each token's chain."""

    key: Path
    cert: Path
    users: dict[str, str]
    private: tuple[str, ...]
    """Repository-name prefixes anonymous requests get no access to."""
    issued: list[tuple[Optional[str], str, list[str]]] = field(default_factory=list)
    """(user or None, scope, actions granted) of every token given out."""

    def token(self, user: Optional[str], scope: str) -> str:
        """A signed JWT for ``user`` with the access ``scope`` asks for (``repository:NAME:pull,push``) allows."""
        access = []
        if scope.startswith("repository:"):
            _, name, actions = scope.split(":", 2)
            allowed = actions.split(",") if user or not name.startswith(self.private) else []
            access.append({"type": "repository", "name": name, "actions": allowed})
            self.issued.append((user, scope, allowed))
        der = subprocess.run(["openssl", "x509", "-in", str(self.cert), "-outform", "DER"], check=True,
                             capture_output=True).stdout
        header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(der).decode()]}
        now = int(time.time())
        claims = {"iss": ISSUER, "sub": user or "", "aud": SERVICE, "exp": now + 600, "nbf": now - 30, "iat": now,
                  "jti": uuid.uuid4().hex, "access": access}
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)], input=signing_input.encode(),
                                   check=True, capture_output=True).stdout
        return f"{signing_input}.{_b64url(signature)}"

    def handler(self) -> type[BaseHTTPRequestHandler]:
        """The HTTP handler of ``GET /token?service=...&scope=...``."""
        service = self

        class _Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
                user = None
                header = self.headers.get("Authorization", "")
                if header.startswith("Basic "):
                    name, _, password = base64.b64decode(header[6:]).decode().partition(":")
                    if service.users.get(name) != password:
                        self._answer(401, {"details": f"incorrect username or password for {name}"})
                        return
                    user = name
                self._answer(200, {"token": service.token(user, query.get("scope", [""])[0])})

            def _answer(self, status: int, body: dict[str, str]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's name)
                return

        return _Handler


@dataclass(frozen=True)
class TokenRegistry:
    """A running token-authenticated registry: its URL and its token service."""

    url: str
    service: TokenService


@contextmanager
def token_registry(state_dir: Path, storage: Path, users: dict[str, str], private: tuple[str, ...] = ()
                   ) -> Iterator[TokenRegistry]:
    """Serve ``storage`` (another registry's) on a free port of 127.0.0.1 behind token authentication, until the
    block ends."""
    state_dir.mkdir(parents=True, exist_ok=True)
    key, cert = state_dir / "token.key", state_dir / "token.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "2", "-subj", "/CN=hvdflow-test-token-service"], check=True, capture_output=True)
    service = TokenService(key, cert, users, private)
    server = ThreadingHTTPServer(("127.0.0.1", 0), service.handler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = free_port()
    config = state_dir / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {storage}}}}}\n"
        f"http: {{addr: '127.0.0.1:{port}'}}\n"
        f"auth: {{token: {{realm: 'http://127.0.0.1:{server.server_port}/token', service: {SERVICE}, "
        f"issuer: {ISSUER}, rootcertbundle: {cert}}}}}\n"
    )
    log = open(state_dir / "registry.log", "ab")
    proc = subprocess.Popen([REGISTRY_BIN, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, ready_status=401)
        yield TokenRegistry(url, service)
    finally:
        proc.terminate()
        proc.wait(10)
        server.shutdown()
        server.server_close()
