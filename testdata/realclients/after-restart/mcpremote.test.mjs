// After run.sh restarted `pdmcp dev` on the same state folder: mcp-remote,
// started again with the home where bob signed in before the restart
// (mcpremote.test.mjs), connects with the tokens it kept, without asking
// anyone to sign in again.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { describe, test } from 'node:test';

import { devInfo, mask } from '../lib.mjs';
import { connect, exercise, oauthArgs, oauthHome } from '../mcpremote-lib.mjs';

describe('after a restart of pdmcp dev: mcp-remote', () => {
  test('bob\'s sign-in from before the restart still works', { timeout: 180_000 }, async (t) => {
    assert.ok(existsSync(oauthHome()), 'no mcp-remote home from before the restart (did mcpremote.test.mjs run?)');
    // Should mcp-remote ask for a new sign-in, fail at once.
    let asked;
    const askedAgain = new Promise((_, reject) => {
      asked = reject;
    });
    const onStderr = (log) => {
      if (/Please authorize this client by visiting/.test(log)) {
        asked(new Error(mask(`mcp-remote asked bob to sign in again after the restart:\n${log.slice(-3000)}`)));
      }
    };
    const { client, log } = await Promise.race([connect(t, oauthHome(), oauthArgs(devInfo()), { onStderr }), askedAgain]);
    await exercise(client, { readable: 'proposal-aurora', log });
  });
});
