// mcp-remote helpers shared by mcpremote.test.mjs and the tests run after
// `pdmcp dev` restarts (after-restart/): start mcp-remote as a desktop
// host does and connect the TypeScript SDK's stdio client to it, answer
// its OAuth sign-in as a person at a browser would, and exercise the tools.
import assert from 'node:assert/strict';
import path from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

import {
  assertNoticeThenText, assertRefusalCode, bin, cleanEnv, devInfo, gatewayCounts, grantTools, keepDir, mask,
  scriptedSignIn, user,
} from './lib.mjs';

/** mcp-remote's home (its ~/.mcp-auth) for bob's OAuth sign-in, kept across the restart. */
export function oauthHome() {
  return path.join(keepDir(), 'mcp-remote-home');
}

/** The arguments for mcp-remote's OAuth flow with the pre-registered client. */
export function oauthArgs(info) {
  return [String(info.callbackPort), '--host', '127.0.0.1',
    '--static-oauth-client-info', JSON.stringify({ client_id: info.hostClientId })];
}

/**
 * Starts mcp-remote with args in home and connects the SDK client to it.
 * onStderr sees mcp-remote's whole log each time more arrives. The client
 * is closed after test t.
 */
export async function connect(t, home, args, { onStderr } = {}) {
  const info = devInfo();
  const transport = new StdioClientTransport({
    command: bin('mcp-remote'),
    args: [info.mcpUrl, ...args, '--transport', 'http-only'],
    cwd: home,
    env: cleanEnv({ HOME: home, NODE_EXTRA_CA_CERTS: info.caFile }),
    stderr: 'pipe',
  });
  let log = '';
  transport.stderr?.on('data', (b) => {
    log += b;
    onStderr?.(log);
  });
  const client = new Client({ name: 'pdmcp-realclients-mcp-remote', version: '1' });
  t.after(() => client.close());
  // Stops mcp-remote also when the connection never completes.
  t.after(() => transport.close());
  try {
    await client.connect(transport);
  } catch (e) {
    throw new Error(mask(`connect through mcp-remote: ${e.message}\n--- mcp-remote's log\n${log.slice(-4000)}`));
  }
  return { client, log: () => mask(log) };
}

/**
 * A watcher for mcp-remote's log that, when it asks the user to sign in,
 * signs in as name (scriptedSignIn) and hands the redirect to its
 * listener. done settles when that is over; started says whether it
 * asked.
 */
export function signInAs(name) {
  const info = devInfo();
  const redirectUri = `http://127.0.0.1:${info.callbackPort}/oauth/callback`;
  const w = { started: false };
  w.done = new Promise((resolve, reject) => {
    w.onStderr = (log) => {
      const m = /Please authorize this client by visiting:\s*(https:\/\/\S+)\s*\n/.exec(log);
      if (!m || w.started) return;
      w.started = true;
      (async () => {
        const authz = new URL(m[1]);
        assert.equal(authz.searchParams.get('client_id'), info.hostClientId);
        assert.equal(authz.searchParams.get('redirect_uri'), redirectUri);
        assert.equal(authz.searchParams.get('code_challenge_method'), 'S256');
        const u = user(info, name);
        const s = await scriptedSignIn(m[1], { username: u.name, password: u.password, redirectUri });
        const cb = await fetch(s.callback);
        const page = await cb.text();
        assert.equal(cb.status, 200, mask(page));
      })().then(resolve, reject);
    };
  });
  w.done.catch(() => {});
  return w;
}

/**
 * Lists the tools, reads a document and is refused one outside the grant,
 * as the model behind a desktop host would see them.
 */
export async function exercise(client, { readable, log }) {
  const info = devInfo();
  const tools = await client.listTools();
  assert.deepEqual(tools.tools.map((x) => x.name).sort(), grantTools(), log());

  const read = await client.callTool({ name: 'read_protected_document', arguments: { documentId: readable } });
  assert.notEqual(read.isError, true, mask(JSON.stringify(read).slice(0, 1000)));
  // A desktop host hands its model the content blocks.
  assertNoticeThenText(read.content, readable, 'Supplier proposal: Aurora Components Ltd.');

  const before = await gatewayCounts(info);
  const refused = await client.callTool({ name: 'read_protected_document', arguments: { documentId: 'no-such-doc' } });
  assert.equal(refused.isError, true);
  assertRefusalCode(refused.content, { layer: 'adapter', code: 'DOCUMENT_NOT_IN_GRANT' });
  assert.deepEqual(await gatewayCounts(info), before, 'an adapter refusal sent a request to the Gateway');
}
