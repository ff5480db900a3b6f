"""Single sign-on to the console with OpenID Connect (authorization code flow with PKCE).

* :mod:`~sagafleet.console.sso.refusal` — why a sign-in is refused (one typed error, a code
  for the security log and a sentence for the person).
* :mod:`~sagafleet.console.sso.provider` — the provider: discovery document, signing keys
  (JWKS, cached, fetched again for an unknown key id), the code exchange.
* :mod:`~sagafleet.console.sso.id_token` — the ID token's checks: signature, issuer,
  audience, authorized party, times with clock skew, nonce.
* :mod:`~sagafleet.console.sso.person` — from verified claims to the person to sign in:
  groups to roles, the tenant, the principal's name.
* :mod:`~sagafleet.console.sso.signin` — starting a sign-in and finishing it at the callback.
* :mod:`~sagafleet.console.sso.routes` — the two HTTP routes.

Settings: :mod:`sagafleet.sso_settings`; identities: :mod:`application.principals.identities`.
"""
