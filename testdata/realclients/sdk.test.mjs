// The MCP TypeScript SDK's client with its own OAuth machinery against
// `pdmcp dev`: from a bare 401 it discovers the protected-resource metadata
// and the provider, runs authorization code + PKCE with the pre-registered
// public client "mcp-host", and redeems the code itself. The only scripted
// part is the person at the browser: redirectToAuthorization fills the
// provider's sign-in form and captures the code from the redirect to the
// loopback callback (nothing listens there).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { before, describe, test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

import {
  assertRefusalCode, devInfo, gatewayCounts, grantTools, mask, objectsIn, user,
} from './lib.mjs';
import { recordingFetch, ScriptedSignInProvider } from './sdk-lib.mjs';

describe('MCP TypeScript SDK client with OAuth', () => {
  let info;
  let redirectUri;
  before(() => {
    assert.ok(process.env.NODE_EXTRA_CA_CERTS, 'NODE_EXTRA_CA_CERTS must name the development CA');
    info = devInfo();
    redirectUri = `http://127.0.0.1:${info.callbackPort}/callback`;
    assert.equal(info.hostClientId, 'mcp-host');
    assert.equal(info.callbackPort, 18124);
  });

  // signIn runs the SDK's flow for one user up to a connected client.
  async function signIn(name, { password } = {}) {
    const u = user(info, name);
    const provider = new ScriptedSignInProvider({
      clientId: info.hostClientId,
      redirectUri,
      username: u.name,
      password: password ?? u.password,
    });
    const requests = [];
    const fetchFn = recordingFetch(requests);
    const url = new URL(info.mcpUrl);

    // First connect: no token, so a 401, discovery, and the sign-in.
    const first = new StreamableHTTPClientTransport(url, { authProvider: provider, fetch: fetchFn });
    const c1 = new Client({ name: 'pdmcp-realclients-sdk', version: '1' });
    await assert.rejects(c1.connect(first), UnauthorizedError);
    return { provider, requests, first, url, fetchFn };
  }

  async function connect(name) {
    const s = await signIn(name);
    assert.equal(s.provider.signInError, undefined, mask(`sign-in: ${s.provider.signInError}`));
    assert.ok(s.provider.code, 'no authorization code was captured');
    // The SDK redeems the code (with the PKCE verifier) and keeps the tokens.
    await s.first.finishAuth(s.provider.code);
    await s.first.close();
    assert.ok(s.provider.saved?.access_token, 'the SDK saved no access token');
    assert.match(s.provider.saved.token_type, /^bearer$/i);
    const client = new Client({ name: 'pdmcp-realclients-sdk', version: '1' });
    await client.connect(new StreamableHTTPClientTransport(s.url, { authProvider: s.provider, fetch: s.fetchFn }));
    return { ...s, client };
  }

  test('alice: 401, discovery, code + PKCE, then tools', { timeout: 120_000 }, async () => {
    const { provider, requests, client } = await connect('alice');
    try {
      // Discovery came from the server's 401, not from configuration.
      const mcp = `POST ${info.mcpUrl}`;
      const prm = `GET ${new URL(info.mcpUrl).origin}/.well-known/oauth-protected-resource/mcp`;
      assert.equal(requests[0], mcp, `requests: ${requests.join(', ')}`);
      assert.ok(requests.indexOf(prm) > 0, `no protected-resource metadata request: ${requests.join(', ')}`);
      const asMeta = requests.findIndex((r) => r.startsWith(`GET ${info.issuer}/.well-known/`) ||
        r.startsWith(`GET ${new URL(info.issuer).origin}/.well-known/`));
      assert.ok(asMeta > requests.indexOf(prm), `provider metadata not read after the resource's: ${requests.join(', ')}`);
      assert.ok(requests.some((r) => r.startsWith(`POST ${info.issuer}/`) && r.includes('token')),
        `the code was not redeemed at the provider: ${requests.join(', ')}`);

      // The authorization request a host sends.
      const q = provider.authorizationUrl.searchParams;
      assert.equal(provider.authorizationUrl.origin, new URL(info.issuer).origin);
      assert.equal(q.get('response_type'), 'code');
      assert.equal(q.get('client_id'), 'mcp-host');
      assert.equal(q.get('redirect_uri'), redirectUri);
      assert.equal(q.get('code_challenge_method'), 'S256');
      assert.match(q.get('code_challenge') ?? '', /^[A-Za-z0-9_-]{43}$/);
      assert.equal(q.get('resource'), info.mcpUrl);
      assert.deepEqual((q.get('scope') ?? '').split(' '), ['openid']);

      const tools = await client.listTools();
      assert.deepEqual(tools.tools.map((t) => t.name).sort(), grantTools());

      const read = await client.callTool({ name: 'read_protected_document', arguments: { documentId: 'proposal-aurora' } });
      assert.notEqual(read.isError, true, `alice's read was refused: ${JSON.stringify(read.structuredContent)}`);
      const text = read.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
      assert.ok(text.includes('Aurora'), 'the document text does not mention Aurora');

      const list = await client.callTool({ name: 'list_approved_documents', arguments: {} });
      // Over HTTP one grant serves every caller: the list is the grant's
      // documents (the key server decides what each caller may open).
      const ids = list.structuredContent.documents.map((d) => d.documentId).sort();
      const granted = JSON.parse(readFileSync(info.grant, 'utf8')).documents;
      assert.deepEqual(ids, [...granted].sort());
      for (const id of user(info, 'alice').documents) assert.ok(ids.includes(id), `alice's ${id} is not listed`);
    } finally {
      await client.close();
    }
  });

  // refusalOf is the refusal a client reads from a refused call's text
  // content (issue 8: no structuredContent that contradicts the tool's
  // output schema, which the SDK validates after listTools).
  function refusalOf(result) {
    assert.equal(result.isError, true, `not a refusal: ${JSON.stringify(result).slice(0, 500)}`);
    assert.equal(result.structuredContent, undefined, 'a refusal carries structuredContent');
    const texts = result.content.filter((c) => c.type === 'text').map((c) => c.text);
    const found = objectsIn(texts).find((o) => o.refused === true);
    assert.ok(found, `no refusal JSON in the text content: ${JSON.stringify(texts)}`);
    assertRefusalCode(texts, { layer: found.layer, code: found.code });
    return found;
  }

  test('carol: signed in, but the key server refuses the document', { timeout: 120_000 }, async () => {
    const { client } = await connect('carol');
    try {
      // listTools first: the SDK then checks every result against the
      // tool's output schema, as hosts built on it do.
      await client.listTools();
      const read = await client.callTool({ name: 'read_protected_document', arguments: { documentId: 'proposal-aurora' } });
      const r = refusalOf(read);
      assert.equal(r.layer, 'keyserver', JSON.stringify(r));
      assert.equal(r.code, 'ACL_DENIED', JSON.stringify(r));
      const text = read.content.map((c) => c.text ?? '').join('\n');
      assert.ok(!text.includes('Aurora Components Ltd'), 'the refusal carries document text');
    } finally {
      await client.close();
    }
  });

  test('alice: a document outside the grant, after listTools, is a readable adapter refusal', { timeout: 120_000 }, async () => {
    const { client } = await connect('alice');
    try {
      const tools = await client.listTools();
      const read = tools.tools.find((t) => t.name === 'read_protected_document');
      assert.ok(read.outputSchema, 'read_protected_document declares no output schema, so the SDK would check nothing');
      const before = await gatewayCounts(info);
      // Before issue 8 this threw "MCP error -32602: Structured content
      // does not match the tool's output schema".
      const result = await client.callTool({ name: 'read_protected_document', arguments: { documentId: 'no-such-doc' } });
      const r = refusalOf(result);
      assert.equal(r.layer, 'adapter');
      assert.equal(r.code, 'DOCUMENT_NOT_IN_GRANT');
      assert.equal(r.status, 403);
      assert.match(r.detail, /list_approved_documents/, 'the refusal does not say what to do next');
      assert.deepEqual(await gatewayCounts(info), before, 'an adapter refusal sent a request to the Gateway');
    } finally {
      await client.close();
    }
  });

  test('a wrong password gets no code and no token', { timeout: 120_000 }, async () => {
    const s = await signIn('bob', { password: 'not-bob-s-password' });
    assert.equal(s.provider.code, undefined);
    assert.match(String(s.provider.signInError), /sign-in refused/);
    assert.equal(s.provider.saved, undefined);
    await s.first.close();
  });
});
