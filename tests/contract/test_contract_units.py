"""Units of work, secrets and definitions: the same promises on both implementations."""

from __future__ import annotations

import pytest
from contract_support import Ports, note, registered, start, started, variant

from application.secrets.placeholders import SecretUnavailable, placeholder
from events import NO_STREAM, ConcurrencyError, InvalidArgument
from events.definition_store.port import DefinitionConflict, DefinitionNotFound
from events.saga_log.streams import SagaNotFound
from sagafleet.example_sagas import trip_definition

CARD = {"number": "4111 1111 1111 1111", "cvc": "123"}
ARGS = {"amount": 10, "card": placeholder("card"), "cards": [placeholder("card")]}


class Boom(Exception):
    """Raised inside a unit to abandon it."""


def test_a_unit_applies_appends_and_secrets_together(ports: Ports) -> None:
    definition = registered(ports)
    with ports.log.unit_of_work() as unit:
        ports.secrets.keep("s1", {"card": CARD}, unit)
        ports.log.append("s1", "t", [started("s1", definition)], NO_STREAM, unit=unit)
        ports.log.append("s2", "t", [started("s2", definition)], NO_STREAM, unit=unit)
        ports.log.append("s1", "t", [note(1)], 1, unit=unit)  # sees its own first append
    assert ports.log.load("s1").version == 2 and ports.log.load("s2").version == 1
    args, revealed = ports.secrets.reveal("s1", ARGS)
    assert args == {"amount": 10, "card": CARD, "cards": [CARD]}
    assert revealed == {"card": CARD}


def test_a_unit_left_by_an_exception_applies_nothing(ports: Ports) -> None:
    definition = registered(ports)
    with pytest.raises(Boom), ports.log.unit_of_work() as unit:
        ports.secrets.keep("s1", {"card": CARD}, unit)
        ports.log.append("s1", "t", [started("s1", definition)], NO_STREAM, unit=unit)
        raise Boom
    with pytest.raises(SagaNotFound):
        ports.log.load("s1")
    with pytest.raises(SecretUnavailable):
        ports.secrets.reveal("s1", ARGS)
    start(ports, "s1")  # the version it took was never used
    assert ports.log.load("s1").version == 1


def test_a_conflict_inside_a_unit_is_the_same_error(ports: Ports) -> None:
    start(ports, "s1")
    definition = registered(ports)
    with pytest.raises(ConcurrencyError), ports.log.unit_of_work() as unit:
        ports.secrets.keep("s1", {"card": {"other": True}}, unit)
        ports.log.append("s1", "t", [started("s1", definition)], NO_STREAM, unit=unit)
    with pytest.raises(SecretUnavailable):
        ports.secrets.reveal("s1", ARGS)


def test_the_first_kept_secret_wins(ports: Ports) -> None:
    for value in (CARD, {"number": "replayed"}):
        with ports.log.unit_of_work() as unit:
            ports.secrets.keep("s1", {"card": value}, unit)
    assert ports.secrets.reveal("s1", ARGS)[1] == {"card": CARD}


def test_secrets_reveal_only_placeholders_and_are_gone_once_purged(ports: Ports) -> None:
    with ports.log.unit_of_work() as unit:
        ports.secrets.keep("s1", {"card": CARD, "pin": 1234}, unit)
        ports.secrets.keep("s2", {}, unit)  # nothing to keep: nothing written
    plain = {"amount": 10}
    assert ports.secrets.reveal("s1", plain) == (plain, {})
    assert ports.secrets.reveal("nobody", plain) == (plain, {})
    _, revealed = ports.secrets.reveal("s1", {"p": placeholder("pin")})
    assert revealed == {"pin": 1234}
    revealed["pin"] = 0  # the caller's copy
    assert ports.secrets.reveal("s1", {"p": placeholder("pin")})[1] == {"pin": 1234}
    with pytest.raises(SecretUnavailable, match="missing"):
        ports.secrets.reveal("s1", {"m": placeholder("missing")})
    ports.secrets.purge("s1")
    ports.secrets.purge("s1")  # purging twice is harmless
    with pytest.raises(SecretUnavailable):
        ports.secrets.reveal("s1", ARGS)


def test_what_a_saga_keeps_is_told_by_saga_until_it_is_purged(ports: Ports) -> None:
    # given two sagas keeping secrets, and one a unit abandoned
    with ports.log.unit_of_work() as unit:
        ports.secrets.keep("s1", {"card": CARD, "pin": 1234}, unit)
        ports.secrets.keep("s2", {"card": "tok_2"}, unit)
    with pytest.raises(Boom), ports.log.unit_of_work() as unit:
        ports.secrets.keep("s3", {"card": "tok_3"}, unit)
        raise Boom
    # then what each keeps is told, for many sagas at once; one keeping nothing is absent
    assert ports.secrets.kept(["s1", "s2", "s3", "nobody"]) == {
        "s1": {"card": CARD, "pin": 1234}, "s2": {"card": "tok_2"}}
    assert ports.secrets.kept([]) == {}
    # and once purged, a saga keeps nothing
    ports.secrets.purge("s1")
    assert ports.secrets.kept(["s1", "s2"]) == {"s2": {"card": "tok_2"}}


def test_a_unit_of_another_kind_is_refused(ports: Ports) -> None:
    with pytest.raises(InvalidArgument):
        ports.secrets.keep("s1", {"card": CARD}, object())
    with pytest.raises(InvalidArgument):
        ports.definitions.send_latest_check(object(), trip_definition(), tenant="t")


def test_definitions_register_idempotently_and_refuse_changed_content(ports: Ports) -> None:
    definition = trip_definition()
    digest = ports.definitions.register(definition, tenant="t")
    assert digest == definition.content_hash()
    assert ports.definitions.register(definition, registered_by="again", tenant="t") == digest
    changed = variant(definition, description="something else")
    with pytest.raises(DefinitionConflict):
        ports.definitions.register(changed, tenant="t")
    assert ports.definitions.by_hash(digest) == definition
    assert ports.definitions.get(definition.name, tenant="t") == definition


def test_definitions_by_name_pick_the_highest_version_unless_told(ports: Ports) -> None:
    first = trip_definition()
    second = variant(first, version=first.version + 1, description="next")
    ports.definitions.register(second, tenant="t")
    ports.definitions.register(first, tenant="t")
    assert ports.definitions.get(first.name, tenant="t") == second
    assert ports.definitions.get(first.name, first.version, tenant="t") == first
    assert ports.definitions.get(first.name, cached_latest=True, tenant="t") == second
    with pytest.raises(DefinitionNotFound):
        ports.definitions.get(first.name, first.version + 2, tenant="t")
    with pytest.raises(DefinitionNotFound):
        ports.definitions.get("nothing", tenant="t")
    with pytest.raises(DefinitionNotFound):
        ports.definitions.by_hash("0" * 64)


def test_the_latest_check_inside_a_unit_tells_a_superseded_definition(ports: Ports) -> None:
    first = trip_definition()
    ports.definitions.register(first, tenant="t")
    with ports.log.unit_of_work() as unit:
        still_latest = ports.definitions.send_latest_check(unit, first, tenant="t")
        ports.log.append("s1", "t", [started("s1", first)], NO_STREAM, unit=unit)
        assert still_latest()
    ports.definitions.register(variant(first, version=first.version + 1, description="next"),
                               tenant="t")
    with ports.log.unit_of_work() as unit:
        stale = ports.definitions.send_latest_check(unit, first, tenant="t")
        ports.log.append("s2", "t", [started("s2", first)], NO_STREAM, unit=unit)
        assert not stale()


def test_a_secret_json_cannot_hold_is_refused_when_kept(ports: Ports) -> None:
    with pytest.raises(TypeError), ports.log.unit_of_work() as unit:
        ports.secrets.keep("s1", {"card": object()}, unit)
    with pytest.raises(SecretUnavailable):
        ports.secrets.reveal("s1", ARGS)
