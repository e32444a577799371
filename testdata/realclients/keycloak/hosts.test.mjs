// Every host docs/hosts.md names, signing in at Keycloak 26.7.3 with the
// realm in deploy/keycloak, through `pdmcp dev --provider keycloak`, each
// configured as docs/hosts.md says: the TypeScript SDK's auth(), Claude
// Code, Codex, opencode, mcp-remote and Gemini CLI. Each runs its own OAuth
// flow (client mcp-host, its own redirect on port 18124); the person at the
// browser is scripted (scriptedSignIn fills Keycloak's own login page and
// follows it to the host's callback, which is delivered to the host's
// listener, or pasted where the host asks for it). Then the host's model
// (the scripted one, model.mjs) reads a document and is refused one.
//
// Two users, and the key server tells them apart: alice reads
// proposal-cirrus, bob is refused it by the key server (ACL_DENIED). Hosts
// signed in as bob read proposal-aurora and are refused proposal-cirrus;
// hosts signed in as alice read proposal-cirrus and are refused a document
// outside the grant (the adapter's DOCUMENT_NOT_IN_GRANT, nothing sent to
// the Gateway). The audit must show each read acting as the user signed
// in. Run by keycloak/run.sh; the tests run in order (one callback port).
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

import { assertRefreshRotates, gemini, geminiDirs, geminiReads, listLine } from '../gemini-lib.mjs';
import {
  assertNoticeThenText, assertRefusalCode, auditLines, bin, cleanEnv, describeRun, devInfo, devPrintedBlock, gatewayCounts,
  hostDirs, mask, newAuditLines, run, scriptedSignIn, start, tempDir, user,
} from '../lib.mjs';
import { connect as connectRemote, oauthArgs, signInAs } from '../mcpremote-lib.mjs';
import { callPrompt, startModel } from '../model.mjs';
import { oauthEntry, opencodeOptions, plain } from '../opencode-lib.mjs';
import { ScriptedSignInProvider } from '../sdk-lib.mjs';

const AURORA = 'Supplier proposal: Aurora Components Ltd.';
const CIRRUS = 'Supplier proposal: Cirrus';

const info = devInfo();
assert.equal(new URL(info.issuer).pathname, '/realms/pdmcp', `dev.json's issuer ${info.issuer} is not the Keycloak realm`);
assert.equal(info.callbackPort, 18124);

// What each user's two reads are, and what the model must see.
const plan = {
  alice: {
    read: 'proposal-cirrus', marker: CIRRUS,
    refused: 'no-such-doc', refusal: { layer: 'adapter', code: 'DOCUMENT_NOT_IN_GRANT' }, gatewayUntouched: true,
  },
  bob: {
    read: 'proposal-aurora', marker: AURORA,
    refused: 'proposal-cirrus', refusal: { layer: 'keyserver', code: 'ACL_DENIED' }, gatewayUntouched: false,
  },
};

/**
 * Runs read(documentId) -> what the model got, for the user's two
 * documents, and checks them: notice then text; the refusal's code; the
 * audit acting as the user; nothing at the Gateway for an adapter refusal.
 */
async function readAndRefusal(name, read) {
  const p = plan[name];
  const principal = user(info, name).principal;
  let seen = auditLines(info).length;
  assertNoticeThenText(await read(p.read), p.read, p.marker);
  const reads = newAuditLines(info, seen).filter((l) => l.tool === 'read_protected_document');
  assert.ok(reads.length > 0 && reads.every((l) => l.actingAs === principal),
    mask(`the read did not act as ${name} (${principal}): ${JSON.stringify(reads)}`));

  const before = await gatewayCounts(info);
  seen = auditLines(info).length;
  assertRefusalCode(await read(p.refused), p.refusal);
  if (p.gatewayUntouched) {
    assert.deepEqual(await gatewayCounts(info), before, 'an adapter refusal sent a request to the Gateway');
  } else {
    const refused = newAuditLines(info, seen).filter((l) => l.tool === 'read_protected_document');
    assert.ok(refused.length > 0 && refused.every((l) => l.actingAs === principal),
      mask(`the refused read did not act as ${name}: ${JSON.stringify(refused)}`));
  }
}

/** A regular expression for an authorization URL at the realm in a host's output. */
function authorizationURL() {
  const origin = new URL(info.issuer).origin.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`(${origin}/realms/pdmcp/protocol/openid-connect/auth\\?[^\\s\\x1b'"]+)`);
}

/**
 * The person at the browser for a host process p: waits for the URL the
 * host prints, checks it names mcp-host, PKCE S256 and redirectUri, signs
 * name in on Keycloak's page and delivers the redirect to the host's
 * listener, or, when nothing listens there, pastes it where the host asks
 * for it (a --no-browser sign-in). Returns how it was delivered. opened,
 * when given, is where the URL comes from instead of the host's output
 * (fakeBrowser's URL).
 */
async function browserFor(p, name, redirect, { opened } = {}) {
  // The URL the host opens in a browser (a terminal may wrap the printed
  // one), or else the one it prints.
  const url = opened
    ? await Promise.race([opened(), p.done.then((r) => { throw new Error(describeRun('the host', r)); })])
    : (await p.waitFor(authorizationURL()))[1];
  const authz = new URL(url);
  assert.equal(authz.searchParams.get('client_id'), info.hostClientId);
  // redirect is the URI, or a pattern for a host that adds a segment.
  const redirectUri = authz.searchParams.get('redirect_uri');
  if (redirect instanceof RegExp) assert.match(redirectUri, redirect);
  else assert.equal(redirectUri, redirect);
  assert.equal(authz.searchParams.get('code_challenge_method'), 'S256');
  const u = user(info, name);
  const s = await scriptedSignIn(url, { username: u.name, password: u.password, redirectUri });
  assert.equal(s.iss, info.issuer, 'Keycloak sent no iss (RFC 9207), or another one');
  let cb;
  try {
    cb = await fetch(s.callback);
  } catch (e) {
    if (e.cause?.code !== 'ECONNREFUSED') throw e;
    p.write(`${s.callback}\n`);
    return 'pasted';
  }
  const page = await cb.text();
  assert.ok(cb.status < 400, mask(`the host's callback answered ${cb.status}: ${page.slice(0, 500)}`));
  return 'listener';
}

/**
 * A browser for a host that opens one (xdg-open, or $BROWSER): a script in
 * dir that writes the URL it is given to a file. Returns the PATH and
 * BROWSER to give the host, and opened(), which resolves with the first
 * URL (polled, 120 s at most).
 */
function fakeBrowser(dir) {
  const bindir = path.join(dir, 'browser-bin');
  mkdirSync(bindir);
  const file = path.join(dir, 'opened-url');
  const script = path.join(bindir, 'xdg-open');
  writeFileSync(script, `#!/bin/sh\nprintf '%s\\n' "$1" >>'${file}'\n`, { mode: 0o755 });
  return {
    env: { PATH: `${bindir}:${process.env.PATH}`, BROWSER: script },
    opened: async () => {
      for (let i = 0; i < 240; i++) {
        if (existsSync(file)) {
          const first = readFileSync(file, 'utf8').split('\n')[0];
          if (first) return first;
        }
        await new Promise((r) => setTimeout(r, 500));
      }
      throw new Error('the host opened no browser within 120 s');
    },
  };
}

describe('the TypeScript SDK auth() at Keycloak: alice and bob', () => {
  async function connect(name) {
    const u = user(info, name);
    const redirectUri = `http://127.0.0.1:${info.callbackPort}/callback`;
    const provider = new ScriptedSignInProvider({ clientId: info.hostClientId, redirectUri, username: u.name, password: u.password });
    const url = new URL(info.mcpUrl);
    const first = new StreamableHTTPClientTransport(url, { authProvider: provider });
    await assert.rejects(new Client({ name: 'kc-sdk', version: '1' }).connect(first), UnauthorizedError);
    assert.equal(provider.signInError, undefined, mask(`sign-in: ${provider.signInError}`));
    assert.equal(provider.authorizationUrl.searchParams.get('redirect_uri'), redirectUri);
    await first.finishAuth(provider.code);
    await first.close();
    const client = new Client({ name: 'kc-sdk', version: '1' });
    await client.connect(new StreamableHTTPClientTransport(url, { authProvider: provider }));
    return client;
  }

  for (const name of ['alice', 'bob']) {
    test(`${name}: signed in at Keycloak, a read and a refusal`, { timeout: 120_000 }, async (t) => {
      const client = await connect(name);
      t.after(() => client.close());
      await client.listTools();
      await readAndRefusal(name, async (documentId) => {
        const r = await client.callTool({ name: 'read_protected_document', arguments: { documentId } });
        return r.isError ? r.content : r.structuredContent;
      });
    });
  }
});

describe('Claude Code at Keycloak: claude mcp login, then claude -p (alice)', () => {
  let d;
  const env = (extra = {}) => cleanEnv({
    HOME: d.home, CLAUDE_CONFIG_DIR: d.config, NODE_EXTRA_CA_CERTS: info.caFile,
    DISABLE_AUTOUPDATER: '1', DISABLE_TELEMETRY: '1', DISABLE_ERROR_REPORTING: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', ANTHROPIC_BASE_URL: 'http://127.0.0.1:9', ...extra,
  });

  test('claude mcp add as docs/hosts.md says, claude mcp login', { timeout: 180_000 }, async (t) => {
    const { root, dirs } = hostDirs(t, 'kc-claude', { home: 'home', config: 'config', work: 'work' });
    d = dirs;
    const add = await run(bin('claude'), ['mcp', 'add', '--transport', 'http', '--client-id', info.hostClientId,
      '--callback-port', String(info.callbackPort), info.serverName, info.mcpUrl], { env: env(), cwd: d.work });
    assert.equal(add.code, 0, describeRun('claude mcp add', add));

    // claude mcp login wants a terminal (script(1) gives it one) and opens
    // a browser, which fakeBrowser stands in for.
    const browser = fakeBrowser(root);
    let r;
    const p = start('script', ['-qefc', `'${bin('claude')}' mcp login ${info.serverName}`, '/dev/null'],
      { env: env(browser.env), cwd: d.work, timeoutMs: 150_000 });
    try {
      const how = await browserFor(p, 'alice', `http://localhost:${info.callbackPort}/callback`, { opened: browser.opened });
      t.diagnostic(`claude mcp login got the redirect: ${how}`);
      r = await p.done;
    } finally {
      p.end();
    }
    assert.equal(r.code, 0, describeRun('claude mcp login', r));
    const list = await run(bin('claude'), ['mcp', 'list'], { env: env(), cwd: d.work });
    assert.ok(list.stdout.split('\n').includes(`${info.serverName}: ${info.mcpUrl} (HTTP) - ✔ Connected`),
      describeRun('claude mcp list', list));

    await readAndRefusal('alice', async (documentId) => {
      const model = await startModel();
      try {
        const tool = `mcp__${info.serverName}__read_protected_document`;
        const p2 = await run(bin('claude'), ['-p', callPrompt('read_protected_document', { documentId }),
          '--allowedTools', tool, '--output-format', 'json'], {
          env: env({ ANTHROPIC_BASE_URL: model.url, ANTHROPIC_API_KEY: 'sk-ant-scripted-model-not-a-key', ENABLE_TOOL_SEARCH: 'false' }),
          cwd: d.work, timeoutMs: 150_000,
        });
        assert.equal(p2.code, 0, describeRun('claude -p', p2));
        assert.deepEqual(model.calls, [{ tool, args: { documentId } }], describeRun('claude -p', p2));
        assert.equal(model.toolResults.length, 1, describeRun('claude -p', p2));
        return model.toolResults[0].content;
      } finally {
        await model.close();
      }
    });
  });
});

describe('Codex at Keycloak: codex mcp login, then codex exec (bob)', () => {
  test('the printed block, codex mcp login, codex exec', { timeout: 300_000 }, async (t) => {
    const { dirs: d } = hostDirs(t, 'kc-codex', { home: 'home', codexHome: 'codex-home', work: 'work' });
    const model = await startModel();
    t.after(() => model.close());
    const block = devPrintedBlock((l) => l.startsWith('Codex ('), 'Codex');
    writeFileSync(path.join(d.codexHome, 'config.toml'), [
      'model = "scripted"', 'model_provider = "scripted"', 'approval_policy = "never"', 'sandbox_mode = "read-only"',
      // Keep the sign-in in CODEX_HOME: no keyring on a CI machine.
      'mcp_oauth_credentials_store = "file"', '',
      '[model_providers.scripted]', 'name = "scripted model"', `base_url = "${model.url}/v1"`,
      'wire_api = "responses"', 'env_key = "SCRIPTED_MODEL_KEY"', '', ...block, '',
    ].join('\n'));
    const env = cleanEnv({ HOME: d.home, CODEX_HOME: d.codexHome, SSL_CERT_FILE: info.caFile, SCRIPTED_MODEL_KEY: 'not-a-key' });

    let r;
    const p = start(bin('codex'), ['mcp', 'login', info.serverName, '--no-browser'], { env, cwd: d.work, timeoutMs: 150_000 });
    try {
      // Codex adds a segment of its own after callback_url's path (the
      // realm's /callback/* entry).
      const how = await browserFor(p, 'bob', new RegExp(`^http://127\\.0\\.0\\.1:${info.callbackPort}/callback/[A-Za-z0-9_-]+$`));
      t.diagnostic(`codex mcp login got the redirect: ${how}`);
      // Its listener has the code; stdin stays open until it is done (it
      // also reads a pasted URL there, and gives up when stdin closes).
      r = await p.done;
    } finally {
      p.end();
    }
    assert.equal(r.code, 0, describeRun('codex mcp login', r));

    await readAndRefusal('bob', async (documentId) => {
      const before = model.toolResults.length;
      const x = await run(bin('codex'), ['exec', '--skip-git-repo-check', '--json',
        callPrompt('read_protected_document', { documentId })], { env, cwd: d.work, timeoutMs: 150_000 });
      assert.equal(x.code, 0, describeRun('codex exec', x));
      assert.equal(model.toolResults.length, before + 1, describeRun('codex exec', x));
      return model.toolResults.at(-1).content;
    });
  });
});

describe('opencode at Keycloak: opencode mcp auth, then opencode run (alice)', () => {
  test('the entry docs/hosts.md gives, opencode mcp auth, opencode run', { timeout: 300_000 }, async (t) => {
    const home = tempDir(t, 'kc-opencode');
    const entry = oauthEntry();
    const p = start(bin('opencode'), ['mcp', 'auth', info.serverName], opencodeOptions({ home, entry }));
    try {
      await browserFor(p, 'alice', `http://127.0.0.1:${info.callbackPort}/mcp/oauth/callback`);
    } finally {
      p.end();
    }
    const auth = await p.done;
    assert.equal(auth.code, 0, describeRun('opencode mcp auth', auth));
    assert.match(plain(auth.stdout), /Authentication successful/, describeRun('opencode mcp auth', auth));

    await readAndRefusal('alice', async (documentId) => {
      const model = await startModel();
      try {
        const r = await run(bin('opencode'), ['run', callPrompt('read_protected_document', { documentId })],
          opencodeOptions({ home, entry, model }));
        assert.equal(r.code, 0, describeRun('opencode run', r));
        assert.deepEqual(model.calls, [{ tool: `${info.serverName}_read_protected_document`, args: { documentId } }],
          describeRun('opencode run', r));
        return model.toolResults[0].content;
      } finally {
        await model.close();
      }
    });
  });
});

describe('mcp-remote at Keycloak: its own OAuth flow (bob)', () => {
  test('signed in on Keycloak\'s page, a read and a refusal', { timeout: 240_000 }, async (t) => {
    const home = tempDir(t, 'kc-mcp-remote');
    const signIn = signInAs('bob');
    const { client, log } = await connectRemote(t, home, oauthArgs(info), { onStderr: signIn.onStderr });
    assert.ok(signIn.started, `mcp-remote connected without a sign-in:\n${log()}`);
    await signIn.done;
    await readAndRefusal('bob', async (documentId) => {
      const r = await client.callTool({ name: 'read_protected_document', arguments: { documentId } });
      // A desktop host hands its model the content blocks.
      return r.content;
    });
  });
});

describe('Gemini CLI at Keycloak: /mcp auth, then gemini -p (bob)', () => {
  test('the settings docs/hosts.md gives, /mcp auth, gemini mcp list, gemini -p', { timeout: 300_000 }, async (t) => {
    const d = geminiDirs();
    mkdirSync(path.join(d.home, '.gemini'), { recursive: true });
    mkdirSync(d.work, { recursive: true });
    const redirectUri = `http://127.0.0.1:${info.callbackPort}/oauth/callback`;
    writeFileSync(path.join(d.home, '.gemini', 'settings.json'), JSON.stringify({
      mcpServers: { [info.serverName]: { httpUrl: info.mcpUrl, trust: true,
        oauth: { enabled: true, clientId: info.hostClientId, redirectUri, scopes: ['openid'] } } },
      security: { auth: { selectedType: 'gemini-api-key' } },
    }, null, 2));
    writeFileSync(path.join(d.home, '.gemini', 'trustedFolders.json'), JSON.stringify({ [d.work]: 'TRUST_FOLDER' }));

    const p = start(bin('gemini'), ['-p', `/mcp auth ${info.serverName}`], gemini([]));
    try {
      await p.waitFor(/Do you want to continue\? \[Y\/n\]/);
      p.write('y\n');
      await browserFor(p, 'bob', redirectUri);
    } finally {
      p.end();
    }
    const r = await p.done;
    assert.ok(!r.timedOut, describeRun('gemini /mcp auth', r));

    // Connected, and still connected on the next run: a sign-in Gemini
    // keeps (with 300 s tokens it refreshed at once, twice with one
    // refresh token, and Keycloak ended the sign-in).
    for (let i = 0; i < 2; i++) {
      const list = await run(bin('gemini'), ['mcp', 'list'], gemini([]));
      assert.match(listLine(list.stdout + list.stderr, info.serverName) ?? '', /- Connected/, describeRun('gemini mcp list', list));
    }
    await readAndRefusal('bob', (documentId) => geminiReads(t, documentId));

    // And past its first refresh, which Keycloak refused with 300 s tokens:
    // a token near its expiry is refreshed once, the refresh token rotates
    // and the spent one is refused. Last, as Keycloak may end a sign-in
    // whose spent refresh token is presented again.
    await assertRefreshRotates();
  });
});
