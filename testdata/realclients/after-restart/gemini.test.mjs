// After run.sh restarted `pdmcp dev` on the same state folder: Gemini CLI,
// with the home where alice signed in before the restart
// (gemini.test.mjs), still lists the server as connected and reads a
// document for its model, without a new sign-in.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { describe, test } from 'node:test';

import { gemini, geminiDirs, geminiReads, listLine } from '../gemini-lib.mjs';
import { assertNoticeThenText, bin, describeRun, devInfo, run } from '../lib.mjs';

describe('after a restart of pdmcp dev: Gemini CLI', () => {
  test('alice\'s sign-in from before the restart still works', { timeout: 240_000 }, async (t) => {
    const info = devInfo();
    assert.ok(existsSync(geminiDirs().home), 'no Gemini home from before the restart (did gemini.test.mjs run?)');
    const list = await run(bin('gemini'), ['mcp', 'list'], gemini([]));
    assert.equal(list.code, 0, describeRun('gemini mcp list', list));
    assert.match(listLine(list.stdout + list.stderr, info.serverName) ?? '', /- Connected/,
      describeRun('gemini mcp list after the restart', list));
    const given = await geminiReads(t, 'proposal-aurora');
    assertNoticeThenText(given, 'proposal-aurora', 'Supplier proposal: Aurora Components Ltd.');
  });
});
