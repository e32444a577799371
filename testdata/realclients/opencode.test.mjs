// opencode against `pdmcp dev`: a remote MCP entry in
// ~/.config/opencode/opencode.json, its model a custom OpenAI-compatible
// provider (the scripted model, model.mjs) named in the same file;
// models.dev is not fetched and nothing updates. Once with alice's token as
// a header: `opencode mcp list` shows the server connected and `opencode
// run` runs the scripted model's call of read_protected_document. Once
// signed in through opencode's own OAuth flow (`opencode mcp auth`, the
// pre-registered client mcp-host on the callback port, the browser's part
// scripted) as bob, after which `opencode mcp list` connects as bob; that
// home is kept in $PDMCP_KEEP.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  aliceHome, auditLines, bin, callerDigest, describeRun, mask, newAuditLines,
  removeDir, run, scriptedSignIn, start, testModelReads, user,
} from './lib.mjs';
import { callPrompt, startModel } from './model.mjs';
import { oauthEntry, oauthHome, opencodeOptions, plain } from './opencode-lib.mjs';

describe('opencode', () => {
  let info, token, root, dirs;
  before(async () => ({ info, token, root, dirs } = await aliceHome('opencode')));
  after(() => removeDir(root));

  // opencode returns run() options for opencode in home (by default the
  // bearer-header one) with entry as the server's config.
  function opencode(_args, { model, home = dirs.home, entry } = {}) {
    return opencodeOptions({ home, model, entry: entry ?? {
      type: 'remote',
      url: info.mcpUrl,
      headers: { Authorization: `Bearer ${token}` },
      oauth: false,
    } });
  }

  test('opencode mcp list shows the server connected', { timeout: 180_000 }, async () => {
    const r = await run(bin('opencode'), ['mcp', 'list'], opencode());
    assert.equal(r.code, 0, describeRun('opencode mcp list', r));
    assert.match(plain(r.stdout), new RegExp(`✓ ${info.serverName} connected`), describeRun('opencode mcp list', r));
    assert.ok(plain(r.stdout).includes(info.mcpUrl), describeRun('opencode mcp list', r));
  });

  async function opencodeReads(t, documentId, opts = {}) {
    const model = await startModel();
    t.after(() => model.close());
    const r = await run(bin('opencode'), ['run', callPrompt('read_protected_document', { documentId }), '--format', 'json'],
      opencode([], { model, ...opts }));
    assert.equal(r.code, 0, describeRun('opencode run', r));
    const tool = `${info.serverName}_read_protected_document`;
    assert.deepEqual(model.calls, [{ tool, args: { documentId } }], describeRun('opencode run', r));
    assert.equal(model.toolResults.length, 1, mask(JSON.stringify(model.toolResults)));
    return model.toolResults[0].content;
  }

  testModelReads('opencode run: ', opencodeReads);

  test('opencode mcp auth signs bob in (mcp-host, code + PKCE); then the list connects as bob', { timeout: 300_000 }, async () => {
    const home = oauthHome();
    removeDir(home);
    const redirectUri = `http://127.0.0.1:${info.callbackPort}/mcp/oauth/callback`;
    const entry = oauthEntry();

    const before = await run(bin('opencode'), ['mcp', 'list'], opencode([], { home, entry }));
    assert.match(plain(before.stdout), new RegExp(`${info.serverName} needs authentication`), describeRun('opencode mcp list', before));

    const p = start(bin('opencode'), ['mcp', 'auth', info.serverName], opencode([], { home, entry }));
    try {
      const [, url] = await p.waitFor(/(https:\/\/127\.0\.0\.1:\d+\/\S*authorize\?\S+)/);
      const authz = new URL(url);
      assert.equal(authz.searchParams.get('client_id'), info.hostClientId);
      assert.equal(authz.searchParams.get('redirect_uri'), redirectUri);
      assert.equal(authz.searchParams.get('code_challenge_method'), 'S256');
      const bob = user(info, 'bob');
      const s = await scriptedSignIn(url, { username: bob.name, password: bob.password, redirectUri });
      const cb = await fetch(s.callback);
      await cb.text();
      assert.equal(cb.status, 200);
    } finally {
      p.end();
    }
    const auth = await p.done;
    assert.equal(auth.code, 0, describeRun('opencode mcp auth', auth));
    assert.match(plain(auth.stdout), /Authentication successful/, describeRun('opencode mcp auth', auth));

    const seen = auditLines(info).length;
    const after = await run(bin('opencode'), ['mcp', 'list'], opencode([], { home, entry }));
    assert.match(plain(after.stdout), new RegExp(`✓ ${info.serverName} connected \\(OAuth\\)`), describeRun('opencode mcp list', after));
    // "connected" means opencode initialized and listed the tools with
    // bob's token; the server's audit file says so too.
    const clients = newAuditLines(info, seen).filter((l) => l.event === 'client' && l.caller === callerDigest(info, 'bob'));
    assert.ok(clients.length > 0, mask(`no client line for bob in the audit after opencode mcp list`));
  });
});
