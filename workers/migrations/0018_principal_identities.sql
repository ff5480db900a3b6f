-- Single sign-on to the console (sagafleet.console.sso, application.principals.identities).
-- Numbered 0018: other branches of issue 33 may bring 0016 and 0017; these tables depend on
-- none of theirs.
--
-- An external identity (the OpenID provider's issuer and the subject it names a person by)
-- is bound to one person principal of one tenant: the first sign-in creates the principal
-- (or links an unbound person principal of the same name), later ones find it by the binding,
-- whatever the name claim says then. Rows are never deleted: a revoked principal keeps its
-- binding, so that identity cannot sign in again under a new name.
CREATE TABLE fleet.principal_identities (
    issuer            text NOT NULL,
    subject           text NOT NULL,
    tenant            text NOT NULL,
    name              text NOT NULL,
    bound_at          timestamptz NOT NULL,
    last_signed_in_at timestamptz NOT NULL,
    PRIMARY KEY (issuer, subject),
    FOREIGN KEY (tenant, name) REFERENCES fleet.principals (tenant, name)
);
-- A principal stands for at most one identity of a provider.
CREATE UNIQUE INDEX principal_identities_owner_idx
    ON fleet.principal_identities (tenant, name, issuer);

-- Every single sign-on, recorded: who, with which groups and the roles they granted, and
-- whether it created, linked or found the principal (or changed its roles).
CREATE TABLE fleet.identity_sign_ins (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    issuer      text NOT NULL,
    subject     text NOT NULL,
    tenant      text NOT NULL,
    name        text NOT NULL,
    outcome     text NOT NULL CHECK (outcome IN ('created', 'linked', 'signed_in',
                                                 'roles_changed')),
    groups      text[] NOT NULL,
    roles       text[] NOT NULL,
    signed_in_at timestamptz NOT NULL
);
CREATE INDEX identity_sign_ins_who_idx ON fleet.identity_sign_ins (tenant, name, signed_in_at);

-- Sign-ins under way: sent to the provider, not back yet. The browser holds the state in a
-- cookie; the row (by the state's sha256) holds the nonce and the PKCE verifier, and is
-- deleted when the callback takes it, so a state is used once. Rows past expires_at are
-- deleted at the next sign-in.
CREATE TABLE fleet.oidc_sign_ins (
    state_digest  text PRIMARY KEY CHECK (length(state_digest) = 64),
    nonce         text NOT NULL,
    code_verifier text NOT NULL,
    next_path     text NOT NULL,
    created_at    timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL
);
CREATE INDEX oidc_sign_ins_expires_idx ON fleet.oidc_sign_ins (expires_at);
