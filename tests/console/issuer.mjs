// A real OpenID Connect provider for the console's sign-in test: panva's oidc-provider (a
// certified implementation, from npm), with its development login and consent pages, PKCE
// required, and JWT access tokens for the `urn:icegate` resource (the API's audience).
// node issuer.mjs PORT REDIRECT_URI
import Provider from "oidc-provider";
import { generateKeyPairSync } from "node:crypto";

const [port, redirectUri] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;
const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
const jwk = { ...privateKey.export({ format: "jwk" }), kid: "console-test", alg: "RS256", use: "sig" };

const provider = new Provider(issuer, {
  jwks: { keys: [jwk] },
  cookies: { keys: ["icegate-console-test-cookie-key"] },
  clients: [{
    client_id: "icegate-console",
    token_endpoint_auth_method: "none",
    redirect_uris: [redirectUri],
    grant_types: ["authorization_code"],
    response_types: ["code"],
  }],
  pkce: { required: () => true },
  scopes: ["openid", "icegate"],
  features: {
    devInteractions: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => "urn:icegate",
      useGrantedResource: () => true,
      getResourceServerInfo: () => ({
        scope: "icegate",
        audience: "urn:icegate",
        accessTokenFormat: "jwt",
        accessTokenTTL: 3600,
        jwt: { sign: { alg: "RS256" } },
      }),
    },
  },
  findAccount: async (_ctx, id) => ({
    accountId: id,
    claims: async () => ({ sub: id, preferred_username: id }),
  }),
});
provider.listen(Number(port), "127.0.0.1", () => console.log(`issuer ${issuer} ready`));
