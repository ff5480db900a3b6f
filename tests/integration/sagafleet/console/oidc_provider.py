"""A real OpenID provider on loopback for the console's single sign-on tests (the fixtures are
in ``oidc/conftest.py``; the browser test in ``browser/`` starts its own).

The provider is npm's ``oidc-provider`` (version pinned in ``provider/package.json`` and
``provider/package-lock.json``), installed with ``npm ci`` into a cache directory outside the
repository (``$XDG_CACHE_HOME/sagafleet/oidc-provider-<lock digest>``, made once; a file lock
keeps parallel test processes from installing at once) and run with node as
``provider/server.mjs`` on a free port of 127.0.0.1, one per test module, stopped after it.
Without node and npm the tests are skipped, saying so (``.ci/run`` installs both).

:class:`ProviderBrowser` is the person's browser at the provider: it follows the provider's
redirects and fills its login and consent forms (oidc-provider's own development pages), with
a cookie jar of its own; the console side is Starlette's TestClient, as in the other console
tests.
"""

from __future__ import annotations

import fcntl
import hashlib
import http.cookiejar
import json
import os
import re
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urljoin

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

PROVIDER_DIR = Path(__file__).resolve().parent / "oidc" / "provider"
CLIENT_ID = "sagafleet-console"
CLIENT_SECRET = "console-client-secret-for-tests-only"
CONSOLE_URL = "http://localhost"
REDIRECT_URI = CONSOLE_URL + "/sign-in/oidc/callback"
ROLE_MAP = "ops-approvers=operator,ops-approvers=approver,auditors=auditor"
START_TIMEOUT_S = 30.0

ACCOUNTS: dict[str, Any] = {  # by login, which the provider makes the subject (sub)
    "ada": {"claims": {
        "preferred_username": "ada", "email": "ada@example.com",
        "groups": ["ops-approvers", "staff"]}},
    "grace": {"claims": {
        "preferred_username": "grace", "groups": ["auditors"]}},
    "eve": {"claims": {
        "preferred_username": "eve", "groups": ["staff"]}},
    "mallory": {"claims": {
        "preferred_username": "bot-default", "groups": ["ops-approvers"]}},
}


NODE_FEATURES = ("process.exit(typeof URL.parse === 'function' && "
                 "typeof require('node:crypto').hash === 'function' ? 0 : 1)")
"""What oidc-provider 9 calls that older node lacks (URL.parse, crypto.hash: node 20.18+)."""


def need_node() -> tuple[str, str]:
    """node and npm, new enough for oidc-provider 9; else the test is skipped, saying why."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("the single sign-on tests run a real OpenID provider (npm oidc-provider) "
                    "and need node and npm on PATH (.ci/run installs them: apt-get install "
                    "nodejs npm)")
    probe = subprocess.run([node, "-e", NODE_FEATURES], capture_output=True, timeout=60,
                           check=False)
    if probe.returncode != 0:
        version = subprocess.run([node, "--version"], capture_output=True, text=True,
                                 timeout=60, check=False).stdout.strip()
        pytest.skip(f"node {version} is too old for oidc-provider 9 (it needs URL.parse and "
                    "crypto.hash: node 20.18 or later)")
    return node, npm


def installed_provider(npm: str) -> Path:
    """The directory holding oidc-provider's node_modules, installed by ``npm ci`` from the
    committed lock file (once per lock file; later calls find it)."""
    lock = (PROVIDER_DIR / "package-lock.json").read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sagafleet"
    target = cache / f"oidc-provider-{hashlib.sha256(lock).hexdigest()[:16]}"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "oidc-provider.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not (target / "node_modules" / "oidc-provider" / "package.json").exists():
            target.mkdir(exist_ok=True)
            for name in ("package.json", "package-lock.json"):
                shutil.copy(PROVIDER_DIR / name, target / name)
            done = subprocess.run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
                                  cwd=target, capture_output=True, text=True, timeout=600,
                                  check=False)
            if done.returncode != 0:
                pytest.fail(f"npm ci of the test OpenID provider failed: {done.stderr[-2000:]}")
    shutil.copy(PROVIDER_DIR / "server.mjs", target / "server.mjs")
    return target


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def private_jwks(kid: str) -> dict[str, Any]:
    """A fresh RSA signing key as a private JWKS (what the provider signs ID tokens with)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    entry = json.loads(RSAAlgorithm.to_jwk(key))
    entry.update(kid=kid, use="sig", alg="RS256")
    return {"keys": [entry]}


@dataclass
class OidcProviderProcess:
    """The provider's node process; :meth:`restart` brings it back (new keys, same issuer)."""

    node: str
    home: Path
    workdir: Path
    port: int
    redirect_uri: str = REDIRECT_URI
    accounts: dict[str, Any] = field(default_factory=lambda: json.loads(json.dumps(ACCOUNTS)))
    process: subprocess.Popen[str] | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_accounts(self) -> None:
        """Write :attr:`accounts` where the provider reads them at each sign-in."""
        (self.home / "accounts.json").write_text(json.dumps(self.accounts))

    def start(self, kid: str = "key-1") -> None:
        self.write_accounts()
        config = {"issuer": self.issuer, "port": self.port, "client_id": CLIENT_ID,
                  "client_secret": CLIENT_SECRET, "redirect_uri": self.redirect_uri,
                  "jwks": private_jwks(kid), "accounts_file": str(self.home / "accounts.json")}
        (self.home / "config.json").write_text(json.dumps(config))
        self.process = subprocess.Popen(
            [self.node, "server.mjs", str(self.home / "config.json")], cwd=self.workdir,
            stdout=subprocess.PIPE, stderr=(self.home / "provider.log").open("a"), text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # blocks until it listens, or ends
        if not line.startswith("listening"):
            self.stop()
            log = (self.home / "provider.log").read_text()[-3000:]
            pytest.fail(f"the test OpenID provider did not start: {line!r} {log}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        self.process = None

    def restart(self, kid: str) -> None:
        """Stop and start again signing with a new key ``kid`` (a key rotation)."""
        self.stop()
        self.start(kid)


def oidc_env(issuer: str, redirect_uri: str = REDIRECT_URI, **more: str) -> dict[str, str]:
    """The console's SAGAFLEET_OIDC_* variables for the test provider."""
    env = {"SAGAFLEET_OIDC_ISSUER": issuer, "SAGAFLEET_OIDC_CLIENT_ID": CLIENT_ID,
           "SAGAFLEET_OIDC_CLIENT_SECRET": CLIENT_SECRET,
           "SAGAFLEET_OIDC_REDIRECT_URL": redirect_uri, "SAGAFLEET_OIDC_ROLE_MAP": ROLE_MAP,
           "SAGAFLEET_OIDC_TENANT": "default",
           "SAGAFLEET_OIDC_SCOPES": "openid profile email groups",
           "SAGAFLEET_OIDC_PROVIDER_NAME": "Test IdP"}
    env.update(more)
    return env


# -- the person's browser at the provider -----------------------------------------------------

_FORM = re.compile(r'<form[^>]*action="([^"]+)"[^>]*>(.*?)</form>', re.S)
_INPUT = re.compile(r'<input[^>]*name="([^"]+)"(?:[^>]*value="([^"]*)")?[^>]*>')
_ABORT = re.compile(r'href="([^"]*/abort)"')


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass
class Answer:
    status: int
    location: str
    text: str


class ProviderBrowser:
    """A person's browser at the provider: a cookie jar, redirects followed by hand."""

    def __init__(self) -> None:
        self.jar = http.cookiejar.CookieJar()
        self._opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.jar), _NoRedirects())
        self.interactions = 0
        """Forms submitted and links followed by the person (not redirects)."""

    def _request(self, url: str, form: dict[str, str] | None = None) -> Answer:
        data = urlencode(form).encode() if form is not None else None
        try:
            with self._opener.open(urllib.request.Request(url, data=data), timeout=10) as r:
                return Answer(r.status, r.headers.get("Location", ""), r.read().decode())
        except urllib.error.HTTPError as exc:
            return Answer(exc.code, exc.headers.get("Location", ""), exc.read().decode())

    def follow(self, url: str, form: dict[str, str] | None = None) -> tuple[str, Answer]:
        """Request ``url`` and follow the provider's redirects; stop at a page, or at a
        redirect to the console (returned as its URL)."""
        answer = self._request(url, form)
        while answer.status in (302, 303) and answer.location:
            url = urljoin(url, answer.location)
            if url.startswith(CONSOLE_URL):
                return url, answer
            answer = self._request(url)
        return url, answer

    def submit(self, page_url: str, page: str, **fields: str) -> tuple[str, Answer]:
        """Fill the page's form (its hidden fields kept) and submit it: one interaction."""
        found = _FORM.search(page)
        assert found, f"no form on the provider's page: {page[:500]}"
        action, inner = found.groups()
        values = {name: unescape(value or "") for name, value in _INPUT.findall(inner)}
        values.update(fields)
        self.interactions += 1
        return self.follow(urljoin(page_url, unescape(action)), values)

    def sign_in(self, authorization_url: str, login: str, *, consent: bool = True) -> str:
        """Log in as ``login`` and consent; the console callback URL the provider sends the
        browser to (with ``consent=False`` the person cancels at the consent page)."""
        url, answer = self.follow(authorization_url)
        if url.startswith(CONSOLE_URL):  # still signed in at the provider, consent given
            return url
        assert 'name="login"' in answer.text, answer.text[:500]
        url, answer = self.submit(url, answer.text, login=login, password="any-password")
        if url.startswith(CONSOLE_URL):
            return url
        if not consent:
            abort = _ABORT.search(answer.text)
            assert abort, answer.text[:500]
            self.interactions += 1
            url, _ = self.follow(urljoin(url, unescape(abort.group(1))))
            return url
        url, answer = self.submit(url, answer.text)
        assert url.startswith(CONSOLE_URL), (answer.status, answer.text[:500])
        return url
