// Gemini CLI helpers shared by gemini.test.mjs and the tests run after
// `pdmcp dev` restarts (after-restart/): where its home is kept, how it is
// run, and a scripted-model call of read_protected_document.
import assert from 'node:assert/strict';
import path from 'node:path';

import { bin, cleanEnv, describeRun, devInfo, keepDir, mask, run } from './lib.mjs';
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

