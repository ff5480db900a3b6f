"""A recipient gate parses what it guards: every address a mailer would see must be proven
internal, and anything it cannot read completely is outside (issue 31, part 2)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from saga_core.approval.recipients import (
    MAX_RECIPIENT_CHARS,
    MAX_RECIPIENT_TEXTS,
    Recipient,
    ascii_domain,
    parse_recipients,
)
from saga_core.approval.risk_gates import ExternalRecipient, RiskGate

RULE = ExternalRecipient(arg="to", internal_domains=["example.com", "bücher.example"])


def _needs_person(to: Any) -> bool:
    return RULE.exceeded({"to": to})


# -- the bug report --------------------------------------------------------------------------


def test_a_list_with_one_outside_address_needs_a_person() -> None:
    # given the list from the bug report: the old check read only the text after the last @
    to = "someone@outside.test, ada@example.com"
    # then a person is asked, and the reason names the outside recipient, not a parse failure
    assert _needs_person(to)
    assert RULE.doubt({"to": to}) == "to is outside the internal domains"


def test_every_address_of_a_list_is_read() -> None:
    assert parse_recipients("someone@outside.test, Ada <ada@example.com>") == [
        Recipient("someone", "outside.test"), Recipient("ada", "example.com")]


# -- internal: what passes without a person ---------------------------------------------------


@pytest.mark.parametrize("to", [
    "ada@example.com",
    "ADA@EXAMPLE.COM",
    "ada@Mail.Example.Com",  # a subdomain, any case
    "Ada Lovelace <ada@example.com>",
    '"Lovelace, Ada" <ada@example.com>',  # a quoted display name with a comma
    '"eve@outside.test" <ada@example.com>',  # an address-looking display name is a name
    "ada@example.com, bob@eu.example.com",
    ["ada@example.com", "Bob <bob@example.com>"],
    ["ada@example.com, carol@example.com"],  # a list of address lists
    "ada(the first)@example.com",  # a comment is not part of the address
    "ada@example.com (Ada)",
    "ada+travel@example.com",
    "ada@bücher.example",  # an internationalised internal domain, as written
    "ada@xn--bcher-kva.example",  # and as its ASCII form
    "ada@BÜCHER.example",
])
def test_addresses_of_internal_domains_need_no_person(to: Any) -> None:
    assert not _needs_person(to), RULE.doubt({"to": to})


# -- outside: a person is asked ---------------------------------------------------------------


@pytest.mark.parametrize("to", [
    "eve@outside.test",
    "eve@example.com.outside.test",  # the internal name as a prefix
    "eve@notexample.com",  # a suffix without a dot boundary
    'eve@outside.test (ada@example.com)',  # the internal address only in a comment
    'Ada <eve@outside.test>, ada@example.com',
    ["ada@example.com", "eve@outside.test"],
    "ada@exаmple.com",  # Cyrillic а: its own xn-- domain, not the internal one
    "ada@xn--exmple-4nf.com",  # the same look-alike, written in ASCII
])
def test_any_outside_address_needs_a_person(to: Any) -> None:
    assert _needs_person(to)
    assert RULE.doubt({"to": to}) == "to is outside the internal domains"


@pytest.mark.parametrize("to", [
    # separators and leftovers a mailer may read differently
    "ada@example.com; eve@outside.test",  # semicolons are not a list separator in RFC 5322
    "ada@example.com <eve@outside.test>",  # an unquoted address as a display name
    "alice@example.com)<eve@outside.test>",  # CVE-2023-27043's shape
    "ada@example.com>",
    "<ada@example.com",
    "ada@example.com,,bob@example.com",
    "ada@example.com,",  # Pythons differ on an empty element (strict getaddresses)
    ", ada@example.com",
    # groups, routes, literals, encoded words
    "team: ada@example.com, bob@example.com;",
    "<@relay.outside.test:ada@example.com>",
    "ada@[127.0.0.1]",
    "=?utf-8?q?Ada?= <ada@example.com>",
    "=?utf-8?b?ZXZlQG91dHNpZGUudGVzdA==?=@example.com",
    # local parts an internal relay may forward outside, quoted or not plain
    '"ada@example.com"@outside.test',  # the internal address only in a quoted local part
    '"eve@outside.test"@example.com',
    '"ada"@example.com',
    '"a,b"@example.com',
    "eve%outside.test@example.com",
    "outside.test!eve@example.com",
    "ädä@example.com",
    # domains that are not canonical host names
    "ada@example.com.",  # a trailing dot
    "ada@example..com",
    "ada@-example.com",
    "ada@example",  # one label: a search domain may be appended
    "ada@ｅｘａｍｐｌｅ.com",  # full-width letters that IDNA 2003 maps to ASCII
    "ada@straße.example",  # IDNA 2003 and 2008 disagree on ß
    "ada@xn--zz.example",  # invalid punycode
    # control and invisible characters
    "ada@example.com\x00eve@outside.test",
    "ada@example.com\neve@outside.test",
    "ada@example.com\r\nBcc: eve@outside.test",
    "ada@example.com\teve@outside.test",
    "ada@exa\u200bmple.com",  # a zero-width space
    "ada@example.com\u202e",  # a bidi override
    # not addresses at all
    "", " ", "ada", "ada@", "@example.com", "ada@@example.com",
    # not strings, or not lists of strings
    None, 42, 4.2, True, {"to": "ada@example.com"}, b"ada@example.com",
    [], [None], ["ada@example.com", 7], [["ada@example.com"]], [""],
    ("ada@example.com",),  # a tuple is not JSON
])
def test_anything_not_read_completely_as_addresses_needs_a_person(to: Any) -> None:
    assert _needs_person(to)
    assert RULE.doubt({"to": to}) == "to cannot be read as email addresses"


def test_a_missing_argument_needs_a_person() -> None:
    assert RULE.exceeded({})


def test_oversized_inputs_are_not_read_and_need_a_person() -> None:
    long_text = "a" * (MAX_RECIPIENT_CHARS - len("@example.com") + 1) + "@example.com"
    assert _needs_person(long_text)
    assert _needs_person(["ada@example.com"] * (MAX_RECIPIENT_TEXTS + 1))
    # while the largest accepted list is judged
    assert not _needs_person(["ada@example.com"] * MAX_RECIPIENT_TEXTS)


def test_deeply_nested_comments_are_refused_or_read_in_bounded_time() -> None:
    # given a comment nested thousands deep (a parser stress); whatever the stdlib makes of
    # it, the gate returns a verdict and lets nothing outside through
    to = "(" * 3000 + ")" * 3000 + "eve@outside.test"
    assert _needs_person(to)


# -- the internal domains themselves -----------------------------------------------------------


def test_internal_domains_are_compared_as_lower_case_ascii() -> None:
    assert ascii_domain("Bücher.Example") == "xn--bcher-kva.example"
    assert ascii_domain("EXAMPLE.com") == "example.com"


@pytest.mark.parametrize("domain", ["localhost", "example.com.", "exa mple.com", "[10.0.0.1]",
                                    "ｅｘａｍｐｌｅ.com", ""])
def test_an_internal_domain_that_is_not_a_canonical_host_name_is_refused(domain: str) -> None:
    with pytest.raises(ValidationError, match="not a host name"):
        ExternalRecipient(arg="to", internal_domains=[domain])


def test_an_internal_domain_may_be_written_with_an_at_sign() -> None:
    rule = ExternalRecipient(arg="to", internal_domains=["@Example.COM"])
    assert rule.internal_domains == ["example.com"]
    assert not rule.exceeded({"to": "ada@example.com"})


def test_with_no_internal_domains_every_recipient_is_outside() -> None:
    assert ExternalRecipient(arg="to").exceeded({"to": "ada@example.com"})


def test_the_gate_gives_the_parse_reason_to_the_approver() -> None:
    gate = RiskGate(risk_class="external_communication",
                    external_recipient={"arg": "to", "internal_domains": ["example.com"]})
    assert gate.reasons({"to": "ada@example.com; eve@outside.test"}) == [
        "to cannot be read as email addresses"]
    assert gate.reasons({"to": "ada@example.com"}) == []
