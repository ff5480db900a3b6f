"""Safe markup (values escaped by construction, a response refuses plain text), where a
sign-in may lead, and which posts come from another site."""

from __future__ import annotations

import pytest
from starlette.datastructures import Headers

from sagafleet.console.gate import same_origin
from sagafleet.console.layout import fragment_response, sign_in_frame
from sagafleet.console.markup import Markup, html, join, pretty_json, url_part
from sagafleet.console.signin import safe_next

HOSTILE = '<script>alert("x")</script>'


def test_a_value_formatted_into_a_template_is_escaped() -> None:
    rendered = html('<td title="{}">{}</td>', HOSTILE, HOSTILE)
    assert "<script>" not in rendered
    assert rendered == ('<td title="&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;">'
                        "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;</td>")


def test_markup_built_here_is_kept_and_plain_text_joined_is_escaped() -> None:
    inner = html("<b>{}</b>", "bold")
    assert html("<p>{}</p>", inner) == "<p><b>bold</b></p>"
    assert join([inner, HOSTILE]) == "<b>bold</b>&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;"


def test_json_shown_to_a_person_is_escaped() -> None:
    shown = pretty_json({"note": HOSTILE})
    assert shown.startswith('<pre class="json">') and "<script>" not in shown


def test_a_url_part_cannot_leave_its_segment() -> None:
    assert url_part("../x?y=1&z") == "..%2Fx%3Fy%3D1%26z"


@pytest.mark.parametrize("respond", [fragment_response,
                                     lambda body: sign_in_frame("t", body)])
def test_a_response_refuses_text_that_was_not_built_as_markup(respond) -> None:
    with pytest.raises(TypeError, match="Markup"):
        respond(f"<p>{HOSTILE}</p>")
    assert respond(Markup("<p>ok</p>")).status_code == 200


@pytest.mark.parametrize(("target", "expected"), [
    ("/queue", "/queue"), ("/sagas/1?x=2", "/sagas/1?x=2"), ("//evil.example/x", "/"),
    ("https://evil.example", "/"), ("/\\evil.example", "/"), ("", "/")])
def test_after_sign_in_only_a_path_of_this_site_is_followed(target, expected) -> None:
    assert safe_next(target) == expected


@pytest.mark.parametrize(("origin", "same"), [
    (None, True), ("http://console.example:8080", True), ("https://console.example:8080", True),
    ("https://evil.example", False), ("null", False), ("http://console.example", False)])
def test_a_post_from_another_origin_is_told_apart(origin, same) -> None:
    raw = {"host": "console.example:8080"} | ({"origin": origin} if origin else {})
    assert same_origin(Headers(raw)) is same
