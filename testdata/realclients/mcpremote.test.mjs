// mcp-remote, the stdio proxy desktop hosts start for a remote server,
// driven by the MCP TypeScript SDK's stdio client as such a host would:
// once with alice's token in a header file, once signing bob in through
// mcp-remote's own OAuth flow (the pre-registered public client mcp-host,
// its loopback listener on the callback port; the browser's part scripted
// with scriptedSignIn). Each lists the tools, reads a document and gets a
// refusal whose code the host can hand its model. Bob's sign-in is kept
// in $PDMCP_KEEP for after-restart/mcpremote.test.mjs.
import assert from 'node:assert/strict';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';

import { devInfo, devToken, tempDir } from './lib.mjs';
import { connect, exercise, oauthArgs, oauthHome, signInAs } from './mcpremote-lib.mjs';

describe('mcp-remote (stdio proxy) through the TypeScript SDK stdio client', () => {
  test('with a bearer header file (alice)', { timeout: 180_000 }, async (t) => {
    const home = tempDir(t, 'mcp-remote-header');
    const headerFile = path.join(home, 'headers');
    writeFileSync(headerFile, `Authorization: Bearer ${await devToken('alice')}\n`, { mode: 0o600 });
    const { client, log } = await connect(t, home, ['--header-file', headerFile]);
    await exercise(client, { readable: 'proposal-aurora', log });
  });

  test('signed in through its own OAuth flow (bob, client mcp-host)', { timeout: 240_000 }, async (t) => {
    const home = oauthHome();
    rmSync(home, { recursive: true, force: true });
    mkdirSync(home, { recursive: true });
    const signIn = signInAs('bob');
    const { client, log } = await connect(t, home, oauthArgs(devInfo()), { onStderr: signIn.onStderr });
    assert.ok(signIn.started, `mcp-remote connected without a sign-in:\n${log()}`);
    await signIn.done;
    await exercise(client, { readable: 'proposal-aurora', log });
  });
});
