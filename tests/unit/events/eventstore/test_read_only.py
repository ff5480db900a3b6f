"""A read-only store's sessions start read-only, keeping whatever options the URL gave."""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict

from events.eventstore.read_only import READ_ONLY_OPTION, read_only_conninfo


def test_a_url_without_options_gets_the_read_only_option() -> None:
    given = "postgresql://reader@replica:5432/app?sslmode=require"
    parts = conninfo_to_dict(read_only_conninfo(given))
    assert parts["options"] == READ_ONLY_OPTION
    assert (parts["host"], parts["dbname"], parts["sslmode"]) == ("replica", "app", "require")


def test_options_the_url_gave_are_kept_and_the_read_only_option_follows() -> None:
    given = "host=replica dbname=app options='-c statement_timeout=5s'"
    options = conninfo_to_dict(read_only_conninfo(given))["options"]
    assert options == f"-c statement_timeout=5s {READ_ONLY_OPTION}"
