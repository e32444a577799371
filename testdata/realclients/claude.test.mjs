// Claude Code's `claude mcp` commands against `pdmcp dev`, configuration
// and health checks only: no account, no sign-in, no model. Its config
// lives in a temporary CLAUDE_CONFIG_DIR and HOME, the development CA is
// trusted through NODE_EXTRA_CA_CERTS, and its model endpoint is a local
// recorder that must see no request.
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
  auditLines, bin, cleanEnv, describeRun, devInfo, devOutput, devToken, mask, newAuditLines, removeDir, run,
  startRecorder, tempDir,
} from './lib.mjs';

describe('Claude Code', () => {
  let info;
  let dirs;
  let model;
  const oauthName = 'protected-documents';
  const bearerName = 'protected-documents-bearer';

  let root;

  before(async () => {
    info = devInfo();
    model = await startRecorder();
    root = tempDir(null, 'claude');
    dirs = { home: path.join(root, 'home'), config: path.join(root, 'config'), work: path.join(root, 'work') };
    for (const d of Object.values(dirs)) mkdirSync(d);
  });

  after(async () => {
    await model?.close();
    removeDir(root);
  });

  function claude(args, { trustCA = true } = {}) {
    const env = cleanEnv({
      HOME: dirs.home,
      CLAUDE_CONFIG_DIR: dirs.config,
      // Any model call would go here, and be seen.
      ANTHROPIC_BASE_URL: model.url,
      DISABLE_AUTOUPDATER: '1',
      DISABLE_TELEMETRY: '1',
      DISABLE_ERROR_REPORTING: '1',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    });
    if (trustCA) env.NODE_EXTRA_CA_CERTS = info.caFile;
    return run(bin('claude'), args, { env, cwd: dirs.work, timeoutMs: 90_000 });
  }

  // serverLine is the line `claude mcp list` prints for one server.
  function serverLine(listOutput, name) {
    return listOutput.split('\n').find((l) => l.startsWith(`${name}: `));
  }

  function projectServers() {
    const cfg = JSON.parse(readFileSync(path.join(dirs.config, '.claude.json'), 'utf8'));
    return cfg.projects?.[dirs.work]?.mcpServers ?? {};
  }

  test('the claude mcp add line pdmcp dev prints is the one for this stack', () => {
    const want = `NODE_EXTRA_CA_CERTS=${info.caFile} claude mcp add --transport http --client-id ${info.hostClientId} ` +
      `--callback-port ${info.callbackPort} ${info.serverName} ${info.mcpUrl}`;
    const printed = devOutput().split('\n').map((l) => l.trim()).filter((l) => l.includes('claude mcp add'));
    assert.deepEqual(printed, [want]);
  });

  test('an OAuth entry (client mcp-host, callback 18124) needs authentication', { timeout: 180_000 }, async () => {
    const add = await claude(['mcp', 'add', '--transport', 'http', '--client-id', info.hostClientId,
      '--callback-port', String(info.callbackPort), oauthName, info.mcpUrl]);
    assert.equal(add.code, 0, describeRun('claude mcp add', add));
    assert.match(add.stdout, new RegExp(`Added HTTP MCP server ${oauthName} with URL: ${escape(info.mcpUrl)}`));
    assert.deepEqual(projectServers()[oauthName], {
      type: 'http',
      url: info.mcpUrl,
      oauth: { clientId: 'mcp-host', callbackPort: 18124 },
    });

    const list = await claude(['mcp', 'list']);
    assert.equal(list.code, 0, describeRun('claude mcp list', list));
    assert.equal(serverLine(list.stdout, oauthName), `${oauthName}: ${info.mcpUrl} (HTTP) - ! Needs authentication`,
      describeRun('claude mcp list', list));

    const get = await claude(['mcp', 'get', oauthName]);
    assert.equal(get.code, 0, describeRun('claude mcp get', get));
    assert.match(get.stdout, /Status: ! Needs authentication/);
    assert.match(get.stdout, /OAuth: client_id configured, callback_port 18124/);
  });

  test('without the development CA the health check fails on the certificate', { timeout: 180_000 }, async () => {
    const list = await claude(['mcp', 'list'], { trustCA: false });
    assert.equal(list.code, 0, describeRun('claude mcp list', list));
    assert.match(serverLine(list.stdout, oauthName) ?? '', /✘ Failed to connect.*(certificate|CERT)/,
      describeRun('claude mcp list without the CA', list));
  });

  test('a bearer-header entry with alice\'s token is connected', { timeout: 180_000 }, async () => {
    const token = await devToken('alice');
    // --header takes several values, so it goes after the name and URL.
    const add = await claude(['mcp', 'add', '--transport', 'http', bearerName, info.mcpUrl,
      '--header', `Authorization: Bearer ${token}`]);
    assert.equal(add.code, 0, describeRun('claude mcp add --header', add));
    assert.ok(!add.rawStdout.includes(token), 'claude mcp add echoed the token');
    assert.equal(projectServers()[bearerName]?.url, info.mcpUrl);

    const seen = auditLines(info).length;
    const list = await claude(['mcp', 'list']);
    assert.equal(list.code, 0, describeRun('claude mcp list', list));
    assert.equal(serverLine(list.stdout, bearerName), `${bearerName}: ${info.mcpUrl} (HTTP) - ✔ Connected`,
      describeRun('claude mcp list', list));
    assert.equal(serverLine(list.stdout, oauthName), `${oauthName}: ${info.mcpUrl} (HTTP) - ! Needs authentication`);

    // The server saw Claude Code initialize as alice.
    const clients = newAuditLines(info, seen).filter((l) => l.event === 'client' && l.name === 'claude-code');
    assert.ok(clients.some((l) => l.caller === `${info.issuer}|alice`),
      mask(`no claude-code client line for alice in the audit: ${JSON.stringify(clients)}`));
  });

  test('no model call was made', () => {
    assert.deepEqual(model.requests, []);
  });
});

function escape(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
