// opencode against `pdmcp dev`: a remote MCP entry with alice's token as
// a header in ~/.config/opencode/opencode.json, its model a custom
// OpenAI-compatible provider (the scripted model, model.mjs) named in the
// same file; models.dev is not fetched and nothing updates. `opencode mcp
// list` shows the server connected; `opencode run` runs the scripted
// model's call of read_protected_document.
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
  assertNoticeThenText, assertRefusalCode, bin, cleanEnv, describeRun, devInfo, devToken, mask, removeDir, run, tempDir,
} from './lib.mjs';
import { callPrompt, startModel } from './model.mjs';

describe('opencode', () => {
  let info;
  let root;
  let dirs;
  let token;
  before(async () => {
    info = devInfo();
    token = await devToken('alice');
    root = tempDir(null, 'opencode');
    dirs = { home: path.join(root, 'home'), work: path.join(root, 'work') };
    for (const d of Object.values(dirs)) mkdirSync(d);
    mkdirSync(path.join(dirs.home, '.config', 'opencode'), { recursive: true });
  });
  after(() => removeDir(root));

  // opencode writes the config for this run (the model's URL changes) and
  // runs opencode with it.
  function opencode(args, { model } = {}) {
    writeFileSync(path.join(dirs.home, '.config', 'opencode', 'opencode.json'), JSON.stringify({
      mcp: {
        [info.serverName]: {
          type: 'remote',
          url: info.mcpUrl,
          headers: { Authorization: `Bearer ${token}` },
          oauth: false,
        },
      },
      provider: {
        scripted: {
          npm: '@ai-sdk/openai-compatible',
          name: 'Scripted model',
          options: { baseURL: `${model?.url ?? 'http://127.0.0.1:9'}/v1`, apiKey: 'scripted-model-not-a-key' },
          models: { scripted: { name: 'Scripted', tool_call: true } },
        },
      },
      model: 'scripted/scripted',
      autoupdate: false,
      share: 'disabled',
    }, null, 2), { mode: 0o600 });
    const env = cleanEnv({
      HOME: dirs.home,
      XDG_CONFIG_HOME: path.join(dirs.home, '.config'),
      XDG_DATA_HOME: path.join(dirs.home, '.local', 'share'),
      XDG_CACHE_HOME: path.join(dirs.home, '.cache'),
      XDG_STATE_HOME: path.join(dirs.home, '.local', 'state'),
      NODE_EXTRA_CA_CERTS: info.caFile,
      OPENCODE_DISABLE_MODELS_FETCH: 'true',
      OPENCODE_DISABLE_AUTOUPDATE: 'true',
    });
    return run(bin('opencode'), args, { env, cwd: dirs.work, timeoutMs: 150_000 });
  }

  test('opencode mcp list shows the server connected', { timeout: 180_000 }, async () => {
    const r = await opencode(['mcp', 'list']);
    assert.equal(r.code, 0, describeRun('opencode mcp list', r));
    const plain = r.stdout.replace(/\x1b\[[0-9;]*m/g, '');
    assert.match(plain, new RegExp(`✓ ${info.serverName} connected`), describeRun('opencode mcp list', r));
    assert.ok(plain.includes(info.mcpUrl), describeRun('opencode mcp list', r));
  });

  async function opencodeReads(t, documentId) {
    const model = await startModel();
    t.after(() => model.close());
    const r = await opencode(['run', callPrompt('read_protected_document', { documentId }), '--format', 'json'], { model });
    assert.equal(r.code, 0, describeRun('opencode run', r));
    const tool = `${info.serverName}_read_protected_document`;
    assert.deepEqual(model.calls, [{ tool, args: { documentId } }], describeRun('opencode run', r));
    assert.equal(model.toolResults.length, 1, mask(JSON.stringify(model.toolResults)));
    return model.toolResults[0].content;
  }

  test('opencode run: the model gets the untrusted notice, then the document text', { timeout: 240_000 }, async (t) => {
    const given = await opencodeReads(t, 'proposal-aurora');
    assertNoticeThenText(given, 'proposal-aurora', 'Supplier proposal: Aurora Components Ltd.');
  });

  test('opencode run: the model gets a refusal\'s code', { timeout: 240_000 }, async (t) => {
    const given = await opencodeReads(t, 'no-such-doc');
    assertRefusalCode(given, { layer: 'adapter', code: 'DOCUMENT_NOT_IN_GRANT' });
  });
});
