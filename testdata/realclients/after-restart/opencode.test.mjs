// After run.sh restarted `pdmcp dev` on the same state folder: opencode,
// with the home where bob signed in before the restart
// (opencode.test.mjs), still connects as bob without a new sign-in.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { describe, test } from 'node:test';

import { auditLines, bin, callerDigest, describeRun, devInfo, mask, newAuditLines, run } from '../lib.mjs';
import { oauthEntry, oauthHome, opencodeOptions, plain } from '../opencode-lib.mjs';

describe('after a restart of pdmcp dev: opencode', () => {
  test('bob\'s sign-in from before the restart still connects', { timeout: 180_000 }, async () => {
    const info = devInfo();
    assert.ok(existsSync(oauthHome()), 'no opencode home from before the restart (did opencode.test.mjs run?)');
    const seen = auditLines(info).length;
    const r = await run(bin('opencode'), ['mcp', 'list'], opencodeOptions({ home: oauthHome(), entry: oauthEntry() }));
    assert.equal(r.code, 0, describeRun('opencode mcp list', r));
    assert.match(plain(r.stdout), new RegExp(`✓ ${info.serverName} connected \\(OAuth\\)`),
      describeRun('opencode mcp list after the restart', r));
    const clients = newAuditLines(info, seen).filter((l) => l.event === 'client' && l.caller === callerDigest(info, 'bob'));
    assert.ok(clients.length > 0, mask('no client line for bob in the audit after the restart'));
  });
});
