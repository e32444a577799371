// GitHub Copilot CLI in its offline bring-your-own-model mode against
// `pdmcp dev`: COPILOT_OFFLINE=true (no GitHub sign-in, no telemetry, no
// update) and COPILOT_PROVIDER_BASE_URL pointing at the scripted model
// (model.mjs, OpenAI Chat Completions dialect). The server is added with
// `copilot mcp add --transport http ... --header "Authorization: Bearer"`
// (alice's token), listed with `copilot mcp list` / `get`, and `copilot -p`
// runs the scripted model's call of read_protected_document.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
  assertNoticeThenText, assertRefusalCode, aliceHome, bin, cleanEnv, describeRun, mask, removeDir, run,
} from './lib.mjs';
import { callPrompt, startModel } from './model.mjs';

describe('GitHub Copilot CLI (offline, own model)', () => {
  let info, token, root, dirs;
  // One home for every run: Copilot unpacks itself into it on first use.
  before(async () => ({ info, token, root, dirs } = await aliceHome('copilot')));
  after(() => removeDir(root));

  function copilot(args, { model, timeoutMs = 150_000 } = {}) {
    const env = cleanEnv({
      HOME: dirs.home,
      NODE_EXTRA_CA_CERTS: info.caFile,
      COPILOT_OFFLINE: 'true',
      COPILOT_AUTO_UPDATE: 'false',
      // Any model call goes to the scripted model (or to nothing).
      COPILOT_PROVIDER_BASE_URL: model ? `${model.url}/v1` : 'http://127.0.0.1:9/v1',
      COPILOT_PROVIDER_TYPE: 'openai',
      COPILOT_PROVIDER_API_KEY: 'scripted-model-not-a-key',
      COPILOT_MODEL: 'gpt-4.1',
    });
    return run(bin('copilot'), args, { env, cwd: dirs.work, timeoutMs });
  }

  test('copilot mcp add, list and get show the server with its header masked', { timeout: 180_000 }, async () => {
    const add = await copilot(['mcp', 'add', '--transport', 'http', info.serverName, info.mcpUrl,
      '--header', `Authorization: Bearer ${token}`]);
    assert.equal(add.code, 0, describeRun('copilot mcp add', add));
    assert.ok(!add.rawStdout.includes(token), 'copilot mcp add echoed the token');
    const cfg = JSON.parse(readFileSync(path.join(dirs.home, '.copilot', 'mcp-config.json'), 'utf8'));
    assert.equal(cfg.mcpServers?.[info.serverName]?.url, info.mcpUrl, mask(JSON.stringify(cfg)));

    const list = await copilot(['mcp', 'list']);
    assert.equal(list.code, 0, describeRun('copilot mcp list', list));
    assert.match(list.stdout, new RegExp(`^\\s*${info.serverName} \\(http\\)\\s*$`, 'm'), describeRun('copilot mcp list', list));

    const get = await copilot(['mcp', 'get', info.serverName]);
    assert.equal(get.code, 0, describeRun('copilot mcp get', get));
    assert.ok(get.stdout.includes(info.mcpUrl), describeRun('copilot mcp get', get));
    assert.ok(!get.rawStdout.includes(token), 'copilot mcp get showed the token');
  });

  // copilotReads runs copilot -p with the scripted model's call and
  // returns what Copilot handed the model as the tool result.
  async function copilotReads(t, documentId) {
    const model = await startModel();
    t.after(() => model.close());
    const r = await copilot(['-p', callPrompt('read_protected_document', { documentId }), '--allow-all-tools',
      '--output-format', 'json'], { model });
    assert.equal(r.code, 0, describeRun('copilot -p', r));
    const tool = `${info.serverName}-read_protected_document`;
    assert.deepEqual(model.calls, [{ tool, args: { documentId } }], describeRun('copilot -p', r));
    assert.equal(model.toolResults.length, 1, mask(JSON.stringify(model.toolResults)));
    const events = r.stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l));
    assert.ok(events.some((e) => e.type === 'assistant.message' && e.data?.content === 'done'), describeRun('copilot -p', r));
    return model.toolResults[0].content;
  }

  test('copilot -p: the model gets the untrusted notice, then the document text', { timeout: 240_000 }, async (t) => {
    const given = await copilotReads(t, 'proposal-aurora');
    const marker = 'Supplier proposal: Aurora Components Ltd.';
    assertNoticeThenText(given, 'proposal-aurora', marker);
    // Copilot joins the result's text blocks with no separator: the
    // notice block ends with a newline, so the text starts its own line,
    // right after the notice's last sentence.
    const text = typeof given === 'string' ? given : JSON.stringify(given);
    assert.equal(typeof given, 'string', mask(JSON.stringify(given).slice(0, 3000)));
    assert.ok(text.includes(`whatever it claims to be.\n${marker}`),
      `the document text does not start on its own line after the notice:\n${mask(text.slice(0, 3000))}`);
  });

  test('copilot -p: the model gets a refusal\'s code', { timeout: 240_000 }, async (t) => {
    const given = await copilotReads(t, 'no-such-doc');
    assertRefusalCode(given, { layer: 'adapter', code: 'DOCUMENT_NOT_IN_GRANT' });
    // The sentence and the JSON arrive joined with no separator: the
    // sentence ends with a newline, so the JSON is a line of its own that
    // parses as the refusal.
    assert.equal(typeof given, 'string', mask(JSON.stringify(given).slice(0, 3000)));
    const lines = given.split('\n');
    // (Copilot puts "MCP server '<name>': " before the first block.)
    assert.match(lines[0], /Refused by the adapter layer: DOCUMENT_NOT_IN_GRANT \(status \d+\)\.[^{]*$/, mask(given));
    const parsed = lines.slice(1).map((l) => {
      try { return JSON.parse(l); } catch { return null; }
    }).filter((o) => o?.refused === true);
    assert.equal(parsed.length, 1, `no line of what the model got parses as the refusal:\n${mask(given)}`);
    assert.equal(parsed[0].code, 'DOCUMENT_NOT_IN_GRANT', mask(given));
    assert.equal(parsed[0].layer, 'adapter', mask(given));
  });
});
