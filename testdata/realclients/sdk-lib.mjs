// The TypeScript SDK's OAuth client with a scripted person at the browser,
// shared by sdk.test.mjs (against pdmcp dev's provider) and
// keycloak/hosts.test.mjs (against Keycloak's login page).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';

import { scriptedSignIn, secret } from './lib.mjs';

// ScriptedSignInProvider is an OAuthClientProvider for a host whose client
// is registered at the provider in advance (no dynamic registration), and
// whose "browser" is scriptedSignIn.
export class ScriptedSignInProvider {
  constructor({ clientId, redirectUri, username, password }) {
    this.clientId = clientId;
    this.redirectUri = redirectUri;
    this.username = username;
    this.password = password;
    this.client = { client_id: clientId };
    this.saved = undefined;
    this.verifier = undefined;
    this.expectedState = undefined;
    this.authorizationUrl = undefined;
    this.code = undefined;
    this.signInError = undefined;
  }

  get redirectUrl() {
    return this.redirectUri;
  }

  get clientMetadata() {
    return {
      client_name: 'pdmcp realclients test',
      redirect_uris: [this.redirectUri],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
  }

  state() {
    this.expectedState = randomBytes(16).toString('hex');
    return this.expectedState;
  }

  clientInformation() {
    return this.client;
  }

  saveClientInformation(info) {
    // The SDK stamps pre-registered client information with the issuer it
    // was used at; a dynamic registration would change client_id.
    assert.equal(info.client_id, this.clientId, 'the SDK registered a new client instead of using mcp-host');
    this.client = info;
  }

  tokens() {
    return this.saved;
  }

  saveTokens(tokens) {
    secret(tokens.access_token);
    secret(tokens.refresh_token);
    secret(tokens.id_token);
    this.saved = tokens;
  }

  saveCodeVerifier(v) {
    this.verifier = v;
  }

  codeVerifier() {
    return this.verifier;
  }

  async redirectToAuthorization(url) {
    this.authorizationUrl = new URL(url);
    try {
      const { code, state } = await scriptedSignIn(url.toString(), {
        username: this.username,
        password: this.password,
        redirectUri: this.redirectUri,
      });
      assert.equal(state, this.expectedState, 'the redirect carries another state');
      this.code = code;
    } catch (e) {
      this.signInError = e;
    }
  }
}

// recordingFetch is the transport's fetch: it records each request's
// method and URL without its query (which may carry a code).
export function recordingFetch(log) {
  return async (input, init) => {
    const u = new URL(input instanceof Request ? input.url : String(input));
    log.push(`${init?.method ?? (input instanceof Request ? input.method : 'GET')} ${u.origin}${u.pathname}`);
    return fetch(input, init);
  };
}
