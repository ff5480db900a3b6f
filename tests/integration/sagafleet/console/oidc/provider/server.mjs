// A real OpenID provider (npm oidc-provider, pinned in package.json) on loopback, for the
// console's single sign-on tests. Started by tests/integration/sagafleet/console/oidc/conftest.py:
//
//   node server.mjs CONFIG.json
//
// CONFIG names the issuer and port, the console's client, the signing keys (a private JWKS,
// written by the test so it can rotate them) and the accounts file. The accounts file is read
// again at every sign-in, so a test can move a person between groups. oidc-provider's own
// development login and consent pages are the interaction: any password is accepted for a
// login the accounts file lists. Prints "listening <issuer>" once it accepts connections.
import { readFileSync } from 'node:fs';
import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));

// An account by its login, which is its subject (the development login page's rule).
function account(id) {
  const accounts = JSON.parse(readFileSync(config.accounts_file, 'utf8'));
  return Object.hasOwn(accounts, id) ? accounts[id] : undefined;
}

const provider = new Provider(config.issuer, {
  clients: [{
    client_id: config.client_id,
    client_secret: config.client_secret,
    redirect_uris: [config.redirect_uri],
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  jwks: config.jwks,
  cookies: { keys: ['sagafleet-test-provider-cookie-key'] },
  // Scope-requested claims in the ID token itself (the console reads no userinfo).
  conformIdTokenClaims: false,
  claims: {
    openid: ['sub'],
    profile: ['preferred_username', 'name', 'org'],
    email: ['email'],
    groups: ['groups'],
  },
  pkce: { required: () => true },
  features: { devInteractions: { enabled: true } },
  async findAccount(ctx, id) {
    const found = account(id);
    if (!found) return undefined;
    return {
      accountId: id,
      async claims() {
        return { sub: id, ...found.claims };
      },
    };
  },
});
provider.proxy = false;

const server = provider.listen(config.port, '127.0.0.1', () => {
  process.stdout.write(`listening ${config.issuer}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
