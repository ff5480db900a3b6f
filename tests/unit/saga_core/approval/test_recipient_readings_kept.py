"""Kept recipient readings answer exactly what a fresh reading does (issue 35: the hot path
reads a saga's recipient argument at every commit; the kept readings must not change a
verdict)."""

from __future__ import annotations

import pytest

from saga_core.approval.recipients import (
    MAX_RECIPIENT_CHARS,
    ascii_domain,
    parse_recipients,
    read_ascii_domain,
    read_recipient_text,
)
from saga_core.approval.risk_gates import ExternalRecipient

TEXTS = [
    "ada@example.com", "ADA@EXAMPLE.COM", "Ada Lovelace <ada@example.com>",
    '"Lovelace, Ada" <ada@example.com>', "ada@example.com, bob@eu.example.com",
    "ada(the first)@example.com", "ada@bücher.example", "ada@xn--bcher-kva.example",
    "someone@outside.test, ada@example.com", "ada@exаmple.com",
    "ada@example.com; eve@outside.test", "alice@example.com)<eve@outside.test>",
    "ada@example.com,", "team: ada@example.com, bob@example.com;", "ada@[127.0.0.1]",
    "=?utf-8?q?Ada?= <ada@example.com>", '"ada"@example.com', "eve%outside.test@example.com",
    "ada@example.com.", "ada@ｅｘａｍｐｌｅ.com", "ada@straße.example", "ada@xn--zz.example",
    "ada@example.com\r\nBcc: eve@outside.test", "ada@exa\u200bmple.com", "", " ", "ada",
    "@example.com", "a" * MAX_RECIPIENT_CHARS + "@example.com",
]
DOMAINS = ["example.com", "EXAMPLE.COM", "bücher.example", "xn--bcher-kva.example",
           "localhost", "example.com.", "exa mple.com", "[10.0.0.1]", "ｅｘａｍｐｌｅ.com",
           "straße.example", "xn--zz.example", "", "a" * 300 + ".com"]


@pytest.mark.parametrize("text", TEXTS)
def test_a_kept_reading_equals_a_fresh_one(text: str) -> None:
    # given a string read once (now kept) and read again from what was kept
    first, again = parse_recipients(text), parse_recipients(text)
    fresh = read_recipient_text(text)
    # then both answer what a fresh reading answers
    expected = None if not fresh else list(fresh)
    assert first == again == expected


@pytest.mark.parametrize("domain", DOMAINS)
def test_a_kept_domain_equals_a_fresh_one(domain: str) -> None:
    assert ascii_domain(domain) == ascii_domain(domain) == read_ascii_domain(domain)


def test_a_caller_changing_its_answer_does_not_change_the_kept_one() -> None:
    # given a reading a caller then empties
    answer = parse_recipients("ada@example.com, eve@outside.test")
    assert answer is not None
    answer.clear()
    # when the same string is read again, the gate still sees the outside address
    rule = ExternalRecipient(arg="to", internal_domains=["example.com"])
    assert rule.exceeded({"to": "ada@example.com, eve@outside.test"})


def test_a_list_of_strings_is_read_string_by_string_as_before() -> None:
    texts = ["ada@example.com", "Bob <bob@example.com>, carol@example.com"]
    expected = [r for text in texts for r in (read_recipient_text(text) or ())]
    assert parse_recipients(texts) == expected
