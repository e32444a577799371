// Gemini CLI helpers shared by gemini.test.mjs and the tests run after
// `pdmcp dev` restarts (after-restart/): where its home is kept, how it is
// run, and a scripted-model call of read_protected_document.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

import { bin, cleanEnv, describeRun, devInfo, keepDir, mask, run, secret } from './lib.mjs';
import { callPrompt, startModel } from './model.mjs';

/** The Gemini home shared with after-restart/gemini.test.mjs. */
export function geminiDirs() {
  const root = path.join(keepDir(), 'gemini');
  return { root, home: path.join(root, 'home'), work: path.join(root, 'work') };
}

/** Runs gemini with the scripted model and the development CA. */
export function gemini(args, { model, timeoutMs = 150_000 } = {}) {
  const info = devInfo();
  const d = geminiDirs();
  const env = cleanEnv({
    HOME: d.home,
    NODE_EXTRA_CA_CERTS: info.caFile,
    GEMINI_API_KEY: 'scripted-model-not-a-key',
    GOOGLE_GEMINI_BASE_URL: model?.url ?? 'http://127.0.0.1:9',
    NO_BROWSER: 'true',
  });
  return { env, cwd: d.work, timeoutMs, args };
}

/** The line `gemini mcp list` prints for the server, trimmed. */
export function listLine(stdout, name) {
  return stdout.split('\n').map((l) => l.trim()).find((l) => l.includes(` ${name}: `) || l.startsWith(`${name}: `));
}

/**
 * Asks the scripted model's way for read_protected_document and returns
 * what Gemini handed the model as the tool result.
 */
export async function geminiReads(t, documentId) {
  const model = await startModel();
  t.after(() => model.close());
  const g = gemini([], { model });
  // An explicit model: no routing requests to a classifier model.
  const r = await run(bin('gemini'), ['-p', callPrompt('read_protected_document', { documentId }),
    '-m', 'gemini-2.5-pro', '--output-format', 'json'], g);
  assert.equal(r.code, 0, describeRun('gemini -p', r));
  const info = devInfo();
  const tool = `mcp_${info.serverName}_read_protected_document`;
  assert.deepEqual(model.calls, [{ tool, args: { documentId } }], describeRun('gemini -p', r));
  assert.equal(model.toolResults.length, 1, mask(JSON.stringify(model.toolResults)));
  assert.equal(JSON.parse(r.stdout).response, 'done', describeRun('gemini -p', r));
  return model.toolResults[0].content;
}

/**
 * What nine minutes of use would do, without waiting for them: Gemini
 * treats an access token within five minutes of its expiry as expired and
 * refreshes it before use. Moving the stored expiry one minute ahead makes
 * it refresh now, at the provider, with the refresh token it holds; then
 * `gemini mcp list` must still connect, with a new access token and a new
 * refresh token (the old one spent), and the new token must be outside
 * Gemini's margin (600 s host tokens), so it does not refresh again at once.
 */
export async function assertRefreshRotates() {
  const info = devInfo();
  const d = geminiDirs();
  const file = path.join(d.home, '.gemini', 'mcp-oauth-tokens.json');
  const stored = JSON.parse(readFileSync(file, 'utf8'));
  const entry = stored.find((e) => e.serverName === info.serverName);
  assert.ok(entry?.token?.refreshToken, 'Gemini kept no refresh token from the sign-in');
  const before = { ...entry.token };
  secret(before.accessToken);
  secret(before.refreshToken);
  entry.token.expiresAt = Date.now() + 60_000;
  writeFileSync(file, JSON.stringify(stored, null, 2), { mode: 0o600 });

  const list = await run(bin('gemini'), ['mcp', 'list'], gemini([]));
  assert.equal(list.code, 0, describeRun('gemini mcp list', list));
  assert.match(listLine(list.stdout + list.stderr, info.serverName) ?? '', /- Connected/,
    describeRun('gemini mcp list with a token about to expire', list));
  const after = JSON.parse(readFileSync(file, 'utf8')).find((e) => e.serverName === info.serverName).token;
  secret(after.accessToken);
  secret(after.refreshToken);
  assert.notEqual(after.accessToken, before.accessToken, 'Gemini did not refresh the access token');
  assert.notEqual(after.refreshToken, before.refreshToken, 'the refresh token did not rotate');
  // 600 s tokens (the realm's and pdmcp dev's): more than Gemini's
  // five-minute margin is left, so it does not refresh again at once.
  assert.ok(after.expiresAt - Date.now() > 5 * 60_000, 'the new access token is within Gemini\'s five-minute margin already');

  // The replaced refresh token is spent.
  const res = await fetch(entry.tokenUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: before.refreshToken,
      client_id: info.hostClientId }).toString(),
  });
  const body = await res.text();
  assert.equal(res.status, 400, mask(body));
  assert.match(body, /invalid_grant/, mask(body));
}
