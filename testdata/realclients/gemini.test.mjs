// Gemini CLI against `pdmcp dev`, signed in through OAuth as alice: the
// server entry in ~/.gemini/settings.json names the pre-registered public
// client mcp-host and a loopback redirect on the callback port; `gemini -p
// "/mcp auth <server>"` runs the sign-in (consent answered on stdin, the
// browser's part scripted with scriptedSignIn, its redirect delivered to
// Gemini's own listener). Then `gemini mcp list`, and `gemini -p` with a
// scripted model (model.mjs, Gemini API dialect through
// GOOGLE_GEMINI_BASE_URL) that asks for read_protected_document.
//
// Gemini checks the RFC 9207 `iss` parameter of the authorization response
// against the provider's issuer and refuses a response without one.
//
// The Gemini home is kept in $PDMCP_KEEP/gemini-home, so that run.sh's
// second round (after-restart/) can use the same sign-in after it restarts
// `pdmcp dev`.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { before, describe, test } from 'node:test';

import { assertRefreshRotates, gemini, geminiDirs, geminiReads, listLine } from './gemini-lib.mjs';
import {
  bin, describeRun, devInfo, mask, run, scriptedSignIn, secret, start, testModelReads, user,
} from './lib.mjs';

describe('Gemini CLI (OAuth sign-in)', () => {
  let info;
  let d;
  before(() => {
    info = devInfo();
    d = geminiDirs();
    rmSync(d.root, { recursive: true, force: true });
    mkdirSync(path.join(d.home, '.gemini'), { recursive: true });
    mkdirSync(d.work, { recursive: true });
    writeFileSync(path.join(d.home, '.gemini', 'settings.json'), JSON.stringify({
      mcpServers: {
        [info.serverName]: {
          httpUrl: info.mcpUrl,
          // Gemini asks before each call of an untrusted server's tool; -p
          // cannot answer.
          trust: true,
          oauth: {
            enabled: true,
            clientId: info.hostClientId,
            redirectUri: `http://127.0.0.1:${info.callbackPort}/oauth/callback`,
            scopes: ['openid'],
          },
        },
      },
      security: { auth: { selectedType: 'gemini-api-key' } },
    }, null, 2));
    // Gemini starts no MCP server from a folder the user has not trusted.
    writeFileSync(path.join(d.home, '.gemini', 'trustedFolders.json'), JSON.stringify({ [d.work]: 'TRUST_FOLDER' }));
  });

  test('before sign-in, gemini mcp list says the server needs authentication', { timeout: 120_000 }, async () => {
    const r = await run(bin('gemini'), ['mcp', 'list'], gemini([]));
    assert.equal(r.code, 0, describeRun('gemini mcp list', r));
    // Gemini prints the list on stderr.
    const out = r.stdout + r.stderr;
    assert.match(out, new RegExp(`requires authentication using: /mcp auth ${info.serverName}`), describeRun('gemini mcp list', r));
    assert.match(listLine(out, info.serverName) ?? '', /Disconnected/, describeRun('gemini mcp list', r));
  });

  test('/mcp auth signs alice in (code + PKCE, iss checked)', { timeout: 180_000 }, async () => {
    const p = start(bin('gemini'), ['-p', `/mcp auth ${info.serverName}`], gemini([]));
    try {
      await p.waitFor(/Do you want to continue\? \[Y\/n\]/);
      p.write('y\n');
      const [, url] = await p.waitFor(/(https:\/\/127\.0\.0\.1:\d+\/\S*authorize\?\S+)\r?\n/);
      const authz = new URL(url);
      assert.equal(authz.origin, new URL(info.issuer).origin);
      assert.equal(authz.searchParams.get('client_id'), info.hostClientId);
      assert.equal(authz.searchParams.get('code_challenge_method'), 'S256');
      assert.equal(authz.searchParams.get('resource'), info.mcpUrl);
      const redirectUri = `http://127.0.0.1:${info.callbackPort}/oauth/callback`;
      assert.equal(authz.searchParams.get('redirect_uri'), redirectUri);
      const alice = user(info, 'alice');
      const s = await scriptedSignIn(url, { username: alice.name, password: alice.password, redirectUri });
      assert.equal(s.iss, info.issuer, 'the authorization response carries no iss (RFC 9207), or another one');
      // What the browser would do with the redirect: Gemini's listener
      // takes the code and redeems it.
      const cb = await fetch(s.callback);
      const page = await cb.text();
      assert.equal(cb.status, 200, mask(page));
      assert.match(page, /Authentication Successful/);
    } finally {
      p.end();
    }
    const r = await p.done;
    assert.ok(!r.timedOut, describeRun('gemini /mcp auth', r));
    assert.match(r.stdout + r.stderr, /authenticat/i, describeRun('gemini /mcp auth', r));

    const list = await run(bin('gemini'), ['mcp', 'list'], gemini([]));
    assert.equal(list.code, 0, describeRun('gemini mcp list', list));
    assert.match(listLine(list.stdout + list.stderr, info.serverName) ?? '', /- Connected/, describeRun('gemini mcp list after sign-in', list));
    // The sign-in is kept in Gemini's home, not in the settings.
    assert.ok(readdirSync(path.join(d.home, '.gemini')).some((f) => /oauth/i.test(f)) ||
      existsSync(path.join(d.home, '.gemini', 'mcp-oauth-tokens.json')), 'no token store in ~/.gemini');
  });

  // What nine minutes of use would do, without waiting for them: Gemini
  // treats an access token within five minutes of its expiry as expired
  // and refreshes it before use. Moving the stored expiry one minute ahead
  // makes it refresh now, at pdmcp dev's provider, with the refresh token
  // it got at sign-in.
  test('a token near its expiry is refreshed; the refresh token rotates', { timeout: 180_000 }, async () => {
    await assertRefreshRotates();
  });

  // The refusal test matters here: Gemini CLI's transport
  // (McpComplianceTransport.fixStructuredContent) parses a result's first
  // text block as JSON into structuredContent when the server sent none,
  // and its SDK then checks that against the tool's output schema: a
  // refusal whose first block were its JSON would reach the model as "MCP
  // error -32602". pdmcp's first block is a sentence.
  testModelReads('', geminiReads);
});

