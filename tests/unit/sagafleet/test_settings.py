"""Settings come from SAGAFLEET_* variables once; a bad one is named in the error; secrets
never print and can come from files (Docker secrets); --help and docs/operations.md list every
variable because both are generated from the fields."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from pydantic import SecretStr

from sagafleet.commands.db import mask_password
from sagafleet.settings import ConfigurationError, Settings, reveal

ROOT = Path(__file__).resolve().parents[3]


def test_no_urls_means_embedded_servers_under_home() -> None:
    settings = Settings.from_env({"SAGAFLEET_HOME": "/tmp/x"})
    assert settings.home == Path("/tmp/x")
    assert settings.embedded_database and settings.embedded_broker


def test_configured_urls_are_used_as_given_and_never_printed() -> None:
    settings = Settings.from_env({
        "SAGAFLEET_DATABASE_URL": "postgresql://u:hunter2@h/db",
        "SAGAFLEET_BROKER_URL": "redis://:hunter3@h:6379/0",
    })
    assert reveal(settings.database_url) == "postgresql://u:hunter2@h/db"
    assert reveal(settings.broker_url) == "redis://:hunter3@h:6379/0"
    assert not settings.embedded_database and not settings.embedded_broker
    assert "hunter" not in repr(settings) and "hunter" not in str(settings)


def test_every_secret_field_is_a_secret_str() -> None:
    secrets = {v.name for v in Settings.variables() if v.secret}
    assert secrets == {"SAGAFLEET_DATABASE_URL", "SAGAFLEET_READ_DATABASE_URL",
                       "SAGAFLEET_BROKER_URL",
                       "SAGAFLEET_SENTRY_DSN", "SAGAFLEET_TOKEN", "SAGAFLEET_ANCHOR_KEY",
                       "SAGAFLEET_OIDC_CLIENT_SECRET"}
    settings = Settings.from_env({name: "s3cret-value-123456" for name in secrets})
    for name in ("database_url", "read_database_url", "broker_url",
                 "sentry_dsn", "token", "anchor_key"):
        assert isinstance(getattr(settings, name), SecretStr), name


def test_empty_variables_count_as_unset() -> None:
    assert Settings.from_env({"SAGAFLEET_DATABASE_URL": ""}).embedded_database


def test_unknown_sagafleet_variables_are_ignored() -> None:
    # the tests' own SAGAFLEET_TEST_* and the agent's SAGAFLEET_KID live in the same environment
    assert Settings.from_env({"SAGAFLEET_TEST_DATABASE_URL": "x", "SAGAFLEET_KID": "k"}).home


def test_malformed_variable_is_named() -> None:
    with pytest.raises(ConfigurationError, match="SAGAFLEET_LEASE_SECONDS"):
        Settings.from_env({"SAGAFLEET_LEASE_SECONDS": "soon"})


def test_every_malformed_variable_is_named_in_one_error_without_its_value() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({"SAGAFLEET_LEASE_SECONDS": "-1", "SAGAFLEET_TOOLS": "rm -rf /",
                           "SAGAFLEET_TENANT": "t" * 500})
    message = str(caught.value)
    for name in ("SAGAFLEET_LEASE_SECONDS", "SAGAFLEET_TOOLS", "SAGAFLEET_TENANT"):
        assert name in message
    assert "rm -rf" not in message and "Traceback" not in message
    assert "pydantic" not in message  # no "For further information visit errors.pydantic.dev"


def test_a_secret_comes_from_its_file_variable(tmp_path: Path) -> None:
    # given a Docker secret mounted as a file, with the trailing newline editors leave
    secret = tmp_path / "db_url"
    secret.write_text("postgresql://fleet:from-file@db/fleet\n")
    settings = Settings.from_env({"SAGAFLEET_DATABASE_URL_FILE": str(secret)})
    assert reveal(settings.database_url) == "postgresql://fleet:from-file@db/fleet"
    token = tmp_path / "token"
    token.write_text("sft_abc\n")
    assert reveal(Settings.from_env({"SAGAFLEET_TOKEN_FILE": str(token)}).token) == "sft_abc"


@pytest.mark.parametrize("secret", ["DATABASE_URL", "BROKER_URL", "SENTRY_DSN", "TOKEN"])
def test_every_secret_has_a_file_variant(secret: str, tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("value-from-a-file")
    settings = Settings.from_env({f"SAGAFLEET_{secret}_FILE": str(path)})
    assert reveal(getattr(settings, secret.lower())) == "value-from-a-file"


def test_a_secret_set_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "db_url"
    path.write_text("postgresql://a@b/c")
    with pytest.raises(ConfigurationError, match="SAGAFLEET_DATABASE_URL and "
                                                 "SAGAFLEET_DATABASE_URL_FILE are both set"):
        Settings.from_env({"SAGAFLEET_DATABASE_URL": "postgresql://x@y/z",
                           "SAGAFLEET_DATABASE_URL_FILE": str(path)})


@pytest.mark.parametrize(("content", "says"), [
    (None, "cannot read"),
    (b"", "is empty"),
    (b"\xff\xfe", "not UTF-8"),
    (b"x" * (64 * 1024 + 1), "larger than"),
])
def test_an_unusable_secret_file_is_named(content: bytes | None, says: str,
                                          tmp_path: Path) -> None:
    path = tmp_path / "broker"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigurationError, match=f"SAGAFLEET_BROKER_URL_FILE is invalid: .*{says}"):
        Settings.from_env({"SAGAFLEET_BROKER_URL_FILE": str(path)})


def test_settings_read_the_process_environment_as_pydantic_settings_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SAGAFLEET_LEASE_SECONDS", "12.5")
    assert Settings().lease_seconds == 12.5
    assert Settings.from_env().lease_seconds == 12.5
    assert Settings.from_env({}).lease_seconds == 30.0  # a given mapping is all there is


def test_describe_lists_every_field_and_every_file_variant_and_nothing_else() -> None:
    described = Settings.describe()
    listed = {line.split()[0] for line in described.splitlines()
              if line.startswith("  SAGAFLEET_")}
    fields = {f"SAGAFLEET_{name.upper()}" for name in Settings.model_fields}
    files = {f"SAGAFLEET_{name.upper()}_FILE" for name, field in Settings.model_fields.items()
             if SecretStr in (field.annotation, *getattr(field.annotation, "__args__", ()))}
    assert listed == fields | files
    for name, field in Settings.model_fields.items():
        assert field.description, f"{name} needs a description: --help shows it"
        assert field.description in described.replace("\n      ", " ")


def test_the_operations_page_settings_table_is_the_generated_one() -> None:
    spec = importlib.util.spec_from_file_location("settings_table",
                                                  ROOT / "scripts" / "settings_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    assert module.page_with_table(page) == page, (
        "docs/operations.md's settings table is stale: run python scripts/settings_table.py")
    for var in Settings.variables():
        assert f"`{var.name}`" in page


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://fleet:hunter2@db:5432/fleet?sslmode=require",
     "postgresql://fleet:***@db:5432/fleet?sslmode=require"),
    ("postgresql://fleet@db/fleet", "postgresql://fleet@db/fleet"),
    ("postgresql://db/fleet?user=fleet&password=hunter2",
     "postgresql://db/fleet?user=fleet&password=***"),
    ("host=db user=fleet password=hunter2 dbname=fleet",
     "host=db user=fleet password=*** dbname=fleet"),
    ("host=db password='hun ter2' dbname=fleet", "host=db password=*** dbname=fleet"),
    ("redis://:hunter2@r:6379/0", "redis://:***@r:6379/0"),
])
def test_db_url_masks_the_password(url: str, shown: str) -> None:
    assert mask_password(url) == shown


def test_the_sandbox_knobs_live_in_the_sandbox_settings_under_the_same_variables() -> None:
    from sagafleet.sandbox.settings import SandboxSettings

    environ = {"SAGAFLEET_TOOL_LATENCY_SECONDS": "0.25",
               "SAGAFLEET_SANDBOX_DATABASE_URL": "postgresql://u:hunter2@h/ledgers"}
    # the sandbox reads them as before the move ...
    sandbox = SandboxSettings.from_env(environ)
    assert sandbox.tool_latency_seconds == 0.25
    assert isinstance(sandbox.sandbox_database_url, SecretStr)
    assert "hunter2" not in repr(sandbox)
    # ... and the fleet's settings neither know nor refuse them
    fleet = Settings.from_env(environ)
    assert not {"tool_latency_seconds", "sandbox_database_url"} & set(type(fleet).model_fields)
    with pytest.raises(ConfigurationError, match="SAGAFLEET_TOOL_LATENCY_SECONDS"):
        SandboxSettings.from_env({"SAGAFLEET_TOOL_LATENCY_SECONDS": "slow"})
