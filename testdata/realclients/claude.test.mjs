// Claude Code against `pdmcp dev`: its `claude mcp` commands (no account,
// no sign-in; the model endpoint is a local recorder that must see no
// request), the lines `pdmcp dev` prints run as printed, and `claude -p`
// with a scripted model (model.mjs) that asks for read_protected_document,
// to see what Claude Code hands its model as the tool result. Its config
// lives in a temporary CLAUDE_CONFIG_DIR and HOME; the development CA is
// trusted through NODE_EXTRA_CA_CERTS.
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
  auditLines, bin, callerDigest, cleanEnv, describeRun, devInfo, devPrintedBlock, devToken, hostDirs, mask, newAuditLines,
  removeDir, run, startRecorder, tempDir, here, testModelReads,
} from './lib.mjs';
import { callPrompt, startModel } from './model.mjs';

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
    ({ root, dirs } = hostDirs(null, 'claude', { home: 'home', config: 'config', work: 'work' }));
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

  // printedBlock is what `pdmcp dev` printed under "Claude Code:", up to
  // the next blank line, each line trimmed.
  function printedBlock() {
    return devPrintedBlock((l) => l.trim() === 'Claude Code:', 'Claude Code');
  }

  test('pdmcp dev prints an export of the CA, then the claude mcp add line for this stack', () => {
    const block = printedBlock();
    const add = `claude mcp add --transport http --client-id ${info.hostClientId} ` +
      `--callback-port ${info.callbackPort} ${info.serverName} ${info.mcpUrl}`;
    const addAt = block.indexOf(add);
    assert.ok(addAt >= 0, `no plain "${add}" line in:\n${block.join('\n')}`);
    const exportAt = block.indexOf(`export NODE_EXTRA_CA_CERTS=${info.caFile}`);
    assert.ok(exportAt >= 0 && exportAt < addAt,
      `no "export NODE_EXTRA_CA_CERTS=${info.caFile}" line before the add line in:\n${block.join('\n')}`);
  });

  // The printed lines, pasted into a shell as they are, leave a setup that
  // a later `claude mcp list` in the same shell can use.
  test('the printed lines, run as printed, leave a server that needs authentication', { timeout: 180_000 }, async (t) => {
    const d = tempDir(t, 'claude-printed');
    for (const sub of ['home', 'config', 'work']) mkdirSync(path.join(d, sub));
    const script = `set -e\n${printedBlock().join('\n')}\nclaude mcp list\n`;
    const env = cleanEnv({
      PATH: `${path.join(here, 'node_modules', '.bin')}:${process.env.PATH}`,
      HOME: path.join(d, 'home'),
      CLAUDE_CONFIG_DIR: path.join(d, 'config'),
      ANTHROPIC_BASE_URL: model.url,
      DISABLE_AUTOUPDATER: '1',
      DISABLE_TELEMETRY: '1',
      DISABLE_ERROR_REPORTING: '1',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    });
    const r = await run('bash', ['-c', script], { env, cwd: path.join(d, 'work'), timeoutMs: 150_000 });
    assert.equal(r.code, 0, describeRun('the printed Claude Code lines', r));
    assert.ok(r.stdout.split('\n').includes(`${info.serverName}: ${info.mcpUrl} (HTTP) - ! Needs authentication`),
      describeRun('the printed lines, then claude mcp list', r));
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
    assert.ok(clients.some((l) => l.caller === callerDigest(info, 'alice')),
      mask(`no claude-code client line for alice in the audit: ${JSON.stringify(clients)}`));
  });

  // claudeAsks runs `claude -p` with alice's token in a bearer-header MCP
  // config and the scripted model, whose prompt asks it to call
  // read_protected_document with documentId. Returns what the model was
  // handed as that call's tool result, as text.
  async function claudeAsks(t, documentId) {
    const scripted = await startModel();
    t.after(() => scripted.close());
    const d = tempDir(t, 'claude-p');
    for (const sub of ['home', 'config', 'work']) mkdirSync(path.join(d, sub));
    const token = await devToken('alice');
    const mcpConfig = path.join(d, 'mcp.json');
    writeFileSync(mcpConfig, JSON.stringify({ mcpServers: { [info.serverName]: {
      type: 'http', url: info.mcpUrl, headers: { Authorization: `Bearer ${token}` } } } }), { mode: 0o600 });
    const env = cleanEnv({
      HOME: path.join(d, 'home'),
      CLAUDE_CONFIG_DIR: path.join(d, 'config'),
      NODE_EXTRA_CA_CERTS: info.caFile,
      ANTHROPIC_BASE_URL: scripted.url,
      ANTHROPIC_API_KEY: 'sk-ant-scripted-model-not-a-key',
      DISABLE_AUTOUPDATER: '1',
      DISABLE_TELEMETRY: '1',
      DISABLE_ERROR_REPORTING: '1',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      // Offer MCP tools to the model directly, not behind Claude Code's
      // tool search, so the scripted model can name one.
      ENABLE_TOOL_SEARCH: 'false',
    });
    const tool = `mcp__${info.serverName}__read_protected_document`;
    const r = await run(bin('claude'), ['-p', callPrompt('read_protected_document', { documentId }),
      '--mcp-config', mcpConfig, '--strict-mcp-config', '--allowedTools', tool, '--output-format', 'json'],
    { env, cwd: path.join(d, 'work'), timeoutMs: 150_000 });
    assert.equal(r.code, 0, describeRun('claude -p', r));
    assert.deepEqual(scripted.calls, [{ tool, args: { documentId } }], describeRun('claude -p', r));
    assert.equal(scripted.toolResults.length, 1, `tool results the model got: ${mask(JSON.stringify(scripted.toolResults))}`);
    assert.equal(JSON.parse(r.stdout).result, 'done', describeRun('claude -p', r));
    return scripted.toolResults[0].content;
  }

  testModelReads('claude -p: ', claudeAsks);

  test('no model call was made', () => {
    assert.deepEqual(model.requests, []);
  });
});

function escape(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
