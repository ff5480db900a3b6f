"""Fixtures of the single sign-on tests: a real OpenID provider (npm oidc-provider) on
loopback, one per test module (see ``oidc_provider.py``); skipped, saying why, without node
and npm."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from oidc_provider import ACCOUNTS, OidcProviderProcess, free_port, installed_provider, need_node


@pytest.fixture(scope="module")
def oidc_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProviderProcess]:
    """A running provider for the module's tests (stopped after them)."""
    node, npm = need_node()
    workdir = installed_provider(npm)
    provider = OidcProviderProcess(node, tmp_path_factory.mktemp("oidc-provider"), workdir,
                                   free_port())
    provider.start()
    try:
        yield provider
    finally:
        provider.stop()


@pytest.fixture
def provider(oidc_provider: OidcProviderProcess) -> Iterator[OidcProviderProcess]:
    """The module's provider, with the original accounts again after each test."""
    yield oidc_provider
    oidc_provider.accounts = json.loads(json.dumps(ACCOUNTS))
    oidc_provider.write_accounts()
    if oidc_provider.process is None:
        oidc_provider.start()


