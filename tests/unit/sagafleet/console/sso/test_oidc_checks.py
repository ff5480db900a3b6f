"""Single sign-on's pure checks: the ID token (signed here with locally generated keys), the
claims to the person (roles from groups, the tenant), and the settings' validation."""

from __future__ import annotations

import base64
import json
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from sagafleet.console.sso.id_token import (
    Expected,
    UnknownSigningKey,
    VerifiedIdToken,
    verify_id_token,
)
from sagafleet.console.sso.person import person_of
from sagafleet.console.sso.provider import metadata_of
from sagafleet.console.sso.refusal import ProviderUnavailable, SsoRefused
from sagafleet.console.sso.signin import code_challenge
from sagafleet.settings import ConfigurationError, Settings
from sagafleet.sso_settings import OidcSettings, oidc_settings, parse_role_map

ISSUER = "https://id.example.com"
CLIENT = "sagafleet-console"
NONCE = "n-0S6_WzA2Mj"
NOW = 1_800_000_000.0

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def jwk_of(key: Any, kid: str) -> dict[str, Any]:
    algorithm = ECAlgorithm if isinstance(key, ec.EllipticCurvePrivateKey) else RSAAlgorithm
    entry = json.loads(algorithm.to_jwk(key.public_key()))
    entry.update(kid=kid, use="sig")
    return entry


JWKS = {"keys": [jwk_of(RSA_KEY, "rsa-1"), jwk_of(EC_KEY, "ec-1")]}


def claims(**changes: Any) -> dict[str, Any]:
    base = {"iss": ISSUER, "aud": CLIENT, "sub": "248289761001", "nonce": NONCE,
            "iat": int(NOW) - 5, "exp": int(NOW) + 300, "preferred_username": "ada",
            "groups": ["ops-approvers", "staff"]}
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def token(payload: dict[str, Any] | None = None, *, key: Any = RSA_KEY, kid: str | None = "rsa-1",
          alg: str = "RS256") -> str:
    headers = {"kid": kid} if kid is not None else {}
    return jwt.encode(claims() if payload is None else payload, key, algorithm=alg,
                      headers=headers)


def expected(**changes: Any) -> Expected:
    values: dict[str, Any] = {"issuer": ISSUER, "client_id": CLIENT, "nonce": NONCE,
                              "now": NOW, "clock_skew_s": 60.0}
    values.update(changes)
    return Expected(**values)


def refusal_of(id_token: str, *, jwks: dict[str, Any] = JWKS, **changes: Any) -> SsoRefused:
    with pytest.raises(SsoRefused) as caught:
        verify_id_token(id_token, jwks, expected(**changes))
    return caught.value


def b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


# -- the ID token ------------------------------------------------------------------------


def test_a_well_formed_token_signed_by_the_providers_key_is_accepted() -> None:
    verified = verify_id_token(token(), JWKS, expected())
    assert (verified.issuer, verified.subject) == (ISSUER, "248289761001")
    assert verified.claims["preferred_username"] == "ada"


def test_an_elliptic_curve_signature_is_accepted_too() -> None:
    verified = verify_id_token(token(key=EC_KEY, kid="ec-1", alg="ES256"), JWKS, expected())
    assert verified.subject == "248289761001"


def test_a_token_signed_by_another_key_under_the_same_kid_is_refused() -> None:
    assert refusal_of(token(key=OTHER_RSA_KEY)).code == "bad_signature"


def test_a_token_whose_claims_were_edited_after_signing_is_refused() -> None:
    header, _, signature = token().split(".")
    forged = ".".join([header, b64(claims(sub="someone-else")), signature])
    assert refusal_of(forged).code == "bad_signature"


def test_alg_none_is_refused() -> None:
    unsigned = b64({"alg": "none", "kid": "rsa-1"}) + "." + b64(claims()) + "."
    refusal = refusal_of(unsigned)
    assert refusal.code == "bad_algorithm" and "'none'" in str(refusal)


def test_an_hmac_token_keyed_with_anything_is_refused() -> None:
    forged = jwt.encode(claims(), "the-client-secret-0123456789abcdef", algorithm="HS256",
                        headers={"kid": "rsa-1"})
    assert refusal_of(forged).code == "bad_algorithm"


def test_a_key_id_the_key_set_lacks_is_an_unknown_key() -> None:
    with pytest.raises(UnknownSigningKey) as caught:
        verify_id_token(token(kid="rotated-in"), JWKS, expected())
    assert caught.value.kid == "rotated-in" and caught.value.code == "unknown_key"


def test_a_key_of_another_type_under_the_kid_is_not_used() -> None:
    # An RS256 token naming the EC key's id: no usable key, never a confused verification.
    assert refusal_of(token(kid="ec-1")).code == "unknown_key"


def test_without_a_kid_the_sets_only_key_of_that_type_is_used() -> None:
    only_rsa = {"keys": [jwk_of(RSA_KEY, "rsa-1")]}
    assert verify_id_token(token(kid=None), only_rsa, expected()).subject == "248289761001"


def test_without_a_kid_several_candidate_keys_are_refused() -> None:
    two = {"keys": [jwk_of(RSA_KEY, "rsa-1"), jwk_of(OTHER_RSA_KEY, "rsa-2")]}
    assert refusal_of(token(kid=None), jwks=two).code == "unknown_key"


def test_an_encryption_key_is_never_used_to_verify() -> None:
    encryption = dict(jwk_of(RSA_KEY, "rsa-1"), use="enc")
    assert refusal_of(token(), jwks={"keys": [encryption]}).code == "unknown_key"


def test_a_token_of_another_issuer_is_refused() -> None:
    refusal = refusal_of(token(claims(iss="https://evil.example.com")))
    assert refusal.code == "wrong_issuer" and "evil.example.com" in str(refusal)


def test_a_token_for_another_client_is_refused() -> None:
    assert refusal_of(token(claims(aud="another-app"))).code == "wrong_audience"


def test_an_audience_list_with_the_client_needs_azp_to_be_the_client() -> None:
    assert refusal_of(token(claims(aud=[CLIENT, "another-app"]))).code == "wrong_audience"
    accepted = verify_id_token(token(claims(aud=[CLIENT, "another-app"], azp=CLIENT)), JWKS,
                               expected())
    assert accepted.subject == "248289761001"


def test_an_azp_naming_another_client_is_refused() -> None:
    assert refusal_of(token(claims(azp="another-app"))).code == "wrong_audience"


def test_an_expired_token_is_refused_past_the_clock_skew() -> None:
    refusal = refusal_of(token(claims(exp=int(NOW) - 61)))
    assert refusal.code == "expired_token" and "61 s ago" in str(refusal)


def test_a_token_just_expired_within_the_clock_skew_is_accepted() -> None:
    assert verify_id_token(token(claims(exp=int(NOW) - 59)), JWKS, expected()).subject


def test_a_token_issued_in_the_future_is_refused() -> None:
    assert refusal_of(token(claims(iat=int(NOW) + 120))).code == "token_from_future"


def test_a_token_not_yet_valid_is_refused() -> None:
    assert refusal_of(token(claims(nbf=int(NOW) + 120))).code == "token_not_yet_valid"
    assert verify_id_token(token(claims(nbf=int(NOW) + 30)), JWKS, expected()).subject


def test_a_token_without_exp_or_iat_is_refused() -> None:
    assert refusal_of(token(claims(exp=None))).code == "malformed_token"
    assert refusal_of(token(claims(iat=None))).code == "malformed_token"


def test_a_token_with_another_nonce_is_refused() -> None:
    assert refusal_of(token(claims(nonce="someone-elses"))).code == "wrong_nonce"
    assert refusal_of(token(claims(nonce=None))).code == "wrong_nonce"


def test_a_token_without_a_subject_is_refused() -> None:
    assert refusal_of(token(claims(sub=None))).code == "malformed_token"


def test_text_that_is_no_jwt_is_refused_as_malformed() -> None:
    assert refusal_of("not-a-token").code == "malformed_token"
    assert refusal_of("").code == "malformed_token"


# -- the person: roles from groups, the tenant ---------------------------------------------


def sso(**changes: Any) -> OidcSettings:
    values: dict[str, Any] = {
        "issuer": ISSUER, "client_id": CLIENT, "client_secret": "s", "redirect_url":
        "https://console.example.com/sign-in/oidc/callback",
        "role_map": parse_role_map("ops-approvers=operator,ops-approvers=approver,"
                                   "auditors=auditor"),
        "tenant": "acme", "tenant_claim": None}
    values.update(changes)
    return OidcSettings(**values)


def verified(**changes: Any) -> VerifiedIdToken:
    return VerifiedIdToken(ISSUER, "248289761001", claims(**changes))


def test_mapped_groups_grant_the_union_of_their_roles() -> None:
    person = person_of(verified(groups=["ops-approvers", "auditors", "staff"]), sso())
    assert person.roles == {"operator", "approver", "auditor"}
    assert (person.tenant, person.name, person.subject) == ("acme", "ada", "248289761001")


def test_a_person_in_no_mapped_group_is_refused_with_403() -> None:
    with pytest.raises(SsoRefused) as caught:
        person_of(verified(groups=["staff"]), sso())
    assert caught.value.code == "no_mapped_group" and caught.value.status == 403
    assert "ada is in no group" in str(caught.value) and "staff" in str(caught.value)


def test_a_person_without_a_groups_claim_is_refused() -> None:
    with pytest.raises(SsoRefused) as caught:
        person_of(verified(groups=None), sso())
    assert caught.value.code == "no_mapped_group"


def test_a_single_group_given_as_text_counts_and_a_malformed_claim_is_refused() -> None:
    assert person_of(verified(groups="auditors"), sso()).roles == {"auditor"}
    with pytest.raises(SsoRefused) as caught:
        person_of(verified(groups=[1, 2]), sso())
    assert caught.value.code == "malformed_groups"


def test_the_tenant_comes_from_its_claim_when_configured_so() -> None:
    settings = sso(tenant=None, tenant_claim="org")
    assert person_of(verified(org="globex"), settings).tenant == "globex"
    with pytest.raises(SsoRefused) as missing:
        person_of(verified(), settings)
    assert missing.value.code == "no_tenant"
    with pytest.raises(SsoRefused) as malformed:
        person_of(verified(org="../other tenant"), settings)
    assert malformed.value.code == "no_tenant"


def test_a_name_claim_that_cannot_name_a_principal_is_refused() -> None:
    with pytest.raises(SsoRefused) as caught:
        person_of(verified(preferred_username="Ada Lovelace"), sso())
    assert caught.value.code == "no_name" and "must match" in str(caught.value)


# -- PKCE and the provider's discovery document -------------------------------------------


def test_the_pkce_challenge_is_rfc_7636s_s256_of_the_verifier() -> None:
    # RFC 7636, appendix B
    assert code_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk") == \
        "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"



def test_a_discovery_document_of_another_issuer_is_refused() -> None:
    document = {"issuer": "https://other.example.com", "authorization_endpoint": ISSUER + "/a",
                "token_endpoint": ISSUER + "/t", "jwks_uri": ISSUER + "/j"}
    with pytest.raises(ProviderUnavailable, match="names issuer"):
        metadata_of(document, ISSUER)


def test_a_provider_without_s256_pkce_is_refused() -> None:
    document = {"issuer": ISSUER, "authorization_endpoint": ISSUER + "/a",
                "token_endpoint": ISSUER + "/t", "jwks_uri": ISSUER + "/j",
                "code_challenge_methods_supported": ["plain"]}
    with pytest.raises(ProviderUnavailable, match="S256"):
        metadata_of(document, ISSUER)


# -- the settings ---------------------------------------------------------------------------

GOOD_ENV = {
    "SAGAFLEET_OIDC_ISSUER": ISSUER,
    "SAGAFLEET_OIDC_CLIENT_ID": CLIENT,
    "SAGAFLEET_OIDC_CLIENT_SECRET": "a-client-secret",
    "SAGAFLEET_OIDC_REDIRECT_URL": "https://console.example.com/sign-in/oidc/callback",
    "SAGAFLEET_OIDC_ROLE_MAP": "ops-approvers=operator, auditors=auditor",
    "SAGAFLEET_OIDC_TENANT": "acme",
}


def configured(**changes: str | None) -> OidcSettings | None:
    env = dict(GOOD_ENV)
    for name, value in changes.items():
        env.pop(f"SAGAFLEET_OIDC_{name.upper()}", None)
        if value is not None:
            env[f"SAGAFLEET_OIDC_{name.upper()}"] = value
    return oidc_settings(Settings.from_env(env))


def test_a_complete_configuration_is_read_with_its_role_map() -> None:
    settings = configured()
    assert settings is not None
    assert settings.role_map == {"ops-approvers": {"operator"}, "auditors": {"auditor"}}
    assert settings.scopes == ("openid", "profile", "email") and settings.tenant == "acme"
    assert "a-client-secret" not in repr(settings)


def test_no_issuer_means_no_single_sign_on_and_a_half_configuration_is_an_error() -> None:
    assert oidc_settings(Settings.from_env({})) is None
    with pytest.raises(ConfigurationError, match="SAGAFLEET_OIDC_CLIENT_ID.*ISSUER is unset"):
        oidc_settings(Settings.from_env({"SAGAFLEET_OIDC_CLIENT_ID": CLIENT}))


def test_the_client_secret_can_come_from_a_file(tmp_path: Any) -> None:
    secret = tmp_path / "secret"
    secret.write_text("from-a-file\n")
    settings = configured(client_secret=None, client_secret_file=str(secret))
    assert settings is not None and settings.client_secret == "from-a-file"


@pytest.mark.parametrize(("change", "named"), [
    ({"client_id": None}, "SAGAFLEET_OIDC_CLIENT_ID must be set"),
    ({"client_secret": None}, "SAGAFLEET_OIDC_CLIENT_SECRET must be set"),
    ({"issuer": "http://id.example.com"}, "SAGAFLEET_OIDC_ISSUER must be https"),
    ({"issuer": "ftp://id.example.com"}, "SAGAFLEET_OIDC_ISSUER must be an https"),
    ({"redirect_url": "https://console.example.com/elsewhere"},
     "SAGAFLEET_OIDC_REDIRECT_URL must end in /sign-in/oidc/callback"),
    ({"tenant": None}, "set one of SAGAFLEET_OIDC_TENANT"),
    ({"tenant_claim": "org"}, "set one of SAGAFLEET_OIDC_TENANT"),
    ({"tenant": "no spaces"}, "SAGAFLEET_OIDC_TENANT is invalid"),
    ({"scopes": "profile email"}, "SAGAFLEET_OIDC_SCOPES must include openid"),
    ({"role_map": "ops-approvers"}, "SAGAFLEET_OIDC_ROLE_MAP is invalid: 'ops-approvers' is "
                                    "not group=role"),
    ({"role_map": "bots=agent"}, "agents sign in with their token"),
    ({"role_map": "ops=Operator"}, "SAGAFLEET_OIDC_ROLE_MAP is invalid: role 'Operator'"),
    ({"role_map": " , "}, "maps no group to a role"),
])
def test_a_bad_configuration_is_refused_naming_the_setting(change: dict[str, str | None],
                                                           named: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        configured(**change)
    assert named in str(caught.value)


def test_plain_http_is_allowed_on_loopback_only() -> None:
    settings = configured(issuer="http://127.0.0.1:4000",
                          redirect_url="http://localhost:8000/sign-in/oidc/callback")
    assert settings is not None and settings.issuer == "http://127.0.0.1:4000"


def test_the_clock_skew_is_bounded() -> None:
    with pytest.raises(ConfigurationError, match="SAGAFLEET_OIDC_CLOCK_SKEW_SECONDS"):
        configured(clock_skew_seconds="3600")
