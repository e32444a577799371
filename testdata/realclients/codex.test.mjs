// Codex CLI's `codex mcp` commands reading a config.toml that holds both
// forms pdmcp gives a Codex user: the stdio launch `pdmcp host-config
// --format codex-toml` writes (for a grant acting as the seed's agent user)
// and the HTTP block `pdmcp dev` prints. No login, no model: CODEX_HOME and
// HOME are temporary, and the model endpoint is a local recorder that must
// see no request.
//
// Then `codex exec` makes real tool calls: the printed HTTP block with a
// bearer token (`bearer_token_env_var`, alice's token) and a model provider
// pointing at the scripted model (model.mjs, Responses API). Codex hands its
// model the structuredContent when present, so the model gets the notice
// field ahead of the text; a refusal (no structuredContent) reaches it as the
// content blocks.
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

import {
  assertNoticeThenText, assertRefusalCode, bin, cleanEnv, describeRun, devInfo, devPrintedBlock, devToken, gatewayCounts,
  grantTools, hostDirs, mask, pdmcpBin, removeDir, run, startRecorder,
} from './lib.mjs';
import { callPrompt, startModel } from './model.mjs';

const stdioName = 'protected-documents-stdio';

describe('Codex', () => {
  let info;
  let root;
  let dirs;
  let model;
  let grantFile;
  let auditFile;
  let configToml;

  before(async () => {
    info = devInfo();
    model = await startRecorder();
    ({ root, dirs } = hostDirs(null, 'codex', { home: 'home', codexHome: 'codex-home', work: 'work' }));

    // A stdio grant for the seed's agent user, as an operator writes it.
    const seed = JSON.parse(readFileSync(path.join(path.dirname(info.manifest), 'seed-record.json'), 'utf8'));
    grantFile = path.join(root, 'grant.json');
    auditFile = path.join(root, 'audit.jsonl');
    const g = await run(pdmcpBin(), ['grant', '--manifest', info.manifest, '--all-approved',
      '--local-user', seed.agentUser, '--ttl', '15m', '--out', grantFile]);
    assert.equal(g.code, 0, describeRun('pdmcp grant', g));
    const hc = await run(pdmcpBin(), ['host-config', '--format', 'codex-toml', '--name', stdioName,
      '--config', info.serviceConfig, '--manifest', info.manifest, '--grant', grantFile, '--audit', auditFile]);
    assert.equal(hc.code, 0, describeRun('pdmcp host-config', hc));

    configToml = `${hc.stdout.trimEnd()}\n\n${printedCodexBlock()}\n`;
    writeFileSync(path.join(dirs.codexHome, 'config.toml'), configToml);
  });

  after(async () => {
    await model?.close();
    removeDir(root);
  });

  // printedCodexBlock is the config.toml block `pdmcp dev` printed.
  function printedCodexBlock() {
    return devPrintedBlock((l) => l.startsWith('Codex ('), 'Codex').join('\n');
  }

  function codex(args, { ca = 'CODEX_CA_CERTIFICATE', config } = {}) {
    const codexHome = config ? path.join(root, `codex-home-${Math.random().toString(36).slice(2)}`) : dirs.codexHome;
    if (config) {
      mkdirSync(codexHome);
      writeFileSync(path.join(codexHome, 'config.toml'), config);
    }
    const env = cleanEnv({
      HOME: dirs.home,
      CODEX_HOME: codexHome,
      // Any model call would go here, and be seen.
      OPENAI_BASE_URL: `${model.url}/v1`,
    });
    if (ca) env[ca] = info.caFile;
    return run(bin('codex'), args, { env, cwd: dirs.work, timeoutMs: 90_000 });
  }

  function expectedStdioArgs() {
    return ['clean-env', '--', pdmcpBin(), 'serve', '--config', info.serviceConfig, '--manifest', info.manifest,
      '--grant', grantFile, '--audit', auditFile];
  }

  test('pdmcp dev prints the HTTP block for this stack', () => {
    assert.equal(printedCodexBlock(), [
      `[mcp_servers.${info.serverName}]`,
      `url = "${info.mcpUrl}"`,
      'scopes = ["openid"]',
      `[mcp_servers.${info.serverName}.oauth]`,
      `client_id = "${info.hostClientId}"`,
      `callback_port = ${info.callbackPort}`,
    ].join('\n'));
  });

  test('codex mcp list shows both servers with their command and URL', { timeout: 120_000 }, async () => {
    const r = await codex(['mcp', 'list', '--json']);
    assert.equal(r.code, 0, describeRun('codex mcp list --json', r));
    const byName = Object.fromEntries(JSON.parse(r.stdout).map((s) => [s.name, s]));
    assert.deepEqual(Object.keys(byName).sort(), [info.serverName, stdioName].sort());

    const stdio = byName[stdioName];
    assert.equal(stdio.enabled, true);
    assert.equal(stdio.transport.type, 'stdio');
    assert.equal(stdio.transport.command, pdmcpBin());
    assert.deepEqual(stdio.transport.args, expectedStdioArgs());
    assert.equal(stdio.auth_status, 'unsupported');

    const httpEntry = byName[info.serverName];
    assert.equal(httpEntry.enabled, true);
    assert.equal(httpEntry.transport.type, 'streamable_http');
    assert.equal(httpEntry.transport.url, info.mcpUrl);
    assert.equal(httpEntry.transport.bearer_token_env_var, null);
    // Codex asked the server, trusted its certificate, and met the OAuth
    // challenge: it is an OAuth server this Codex has not signed in to.
    assert.equal(httpEntry.auth_status, 'not_logged_in', describeRun('codex mcp list --json', r));

    const table = await codex(['mcp', 'list']);
    assert.equal(table.code, 0, describeRun('codex mcp list', table));
    assert.match(table.stdout, new RegExp(`^${stdioName}\\s+${escape(pdmcpBin())}\\s+clean-env -- `, 'm'));
    assert.match(table.stdout, new RegExp(`^${info.serverName}\\s+${escape(info.mcpUrl)}\\s.*Not logged in`, 'm'));
  });

  test('codex mcp get shows each entry', { timeout: 120_000 }, async () => {
    const s = await codex(['mcp', 'get', stdioName, '--json']);
    assert.equal(s.code, 0, describeRun('codex mcp get stdio', s));
    const stdio = JSON.parse(s.stdout);
    assert.equal(stdio.transport.command, pdmcpBin());
    assert.deepEqual(stdio.transport.args, expectedStdioArgs());
    assert.deepEqual(stdio.enabled_tools, grantTools(grantFile));
    assert.equal(stdio.startup_timeout_sec, 30);
    assert.equal(stdio.tool_timeout_sec, 120);

    const h = await codex(['mcp', 'get', info.serverName, '--json']);
    assert.equal(h.code, 0, describeRun('codex mcp get http', h));
    const httpEntry = JSON.parse(h.stdout);
    assert.equal(httpEntry.transport.type, 'streamable_http');
    assert.equal(httpEntry.transport.url, info.mcpUrl);
  });

  test('SSL_CERT_FILE, as pdmcp dev advises, also makes Codex trust the stack', { timeout: 120_000 }, async () => {
    const r = await codex(['mcp', 'list', '--json'], { ca: 'SSL_CERT_FILE' });
    assert.equal(r.code, 0, describeRun('codex mcp list --json', r));
    const httpEntry = JSON.parse(r.stdout).find((s) => s.name === info.serverName);
    assert.equal(httpEntry.auth_status, 'not_logged_in');
  });

  test('without the development CA Codex cannot tell', { timeout: 120_000 }, async () => {
    const r = await codex(['mcp', 'list', '--json'], { ca: null });
    assert.equal(r.code, 0, describeRun('codex mcp list --json', r));
    const httpEntry = JSON.parse(r.stdout).find((s) => s.name === info.serverName);
    assert.equal(httpEntry.auth_status, 'unknown');
  });

  // Codex ignores keys it does not know, so a misspelt key would pass
  // silently. Giving each key pdmcp writes a value of the wrong type shows
  // that Codex reads it: it refuses the file and names the key.
  test('every key pdmcp writes is one Codex reads', { timeout: 300_000 }, async () => {
    const keys = [];
    let section = '';
    for (const line of configToml.split('\n')) {
      const sec = /^\[(.+)\]$/.exec(line);
      if (sec) section = sec[1];
      const kv = /^([a-z_]+) = /.exec(line);
      if (kv) keys.push({ section, key: kv[1], line });
    }
    const names = keys.map((k) => `${k.section}.${k.key}`);
    for (const want of [`mcp_servers.${stdioName}.command`, `mcp_servers.${stdioName}.args`,
      `mcp_servers.${stdioName}.enabled_tools`, `mcp_servers.${stdioName}.required`,
      `mcp_servers.${info.serverName}.url`, `mcp_servers.${info.serverName}.oauth.client_id`,
      `mcp_servers.${info.serverName}.oauth.callback_port`]) {
      assert.ok(names.includes(want), `the config does not set ${want}`);
    }
    for (const k of keys) {
      const broken = configToml.replace(k.line, `${k.key} = { wrong = "type" }`);
      const r = await codex(['mcp', 'list', '--json'], { config: broken });
      assert.notEqual(r.code, 0, `Codex accepted a table for ${k.section}.${k.key}: it ignores the key`);
      assert.ok(r.stderr.includes(`${k.section}.${k.key}`), describeRun(`codex with a bad ${k.key}`, r));
    }
  });

  test('the stdio launch Codex would run starts the server', { timeout: 120_000 }, async () => {
    const s = await codex(['mcp', 'get', stdioName, '--json']);
    assert.equal(s.code, 0, describeRun('codex mcp get stdio', s));
    const { command, args } = JSON.parse(s.stdout).transport;
    const client = new Client({ name: 'pdmcp-realclients-codex-launch', version: '1' });
    const transport = new StdioClientTransport({
      command,
      args,
      cwd: dirs.work,
      // What a host adds to its own environment; clean-env drops it again.
      env: cleanEnv({ HOME: dirs.home, OPENAI_API_KEY: 'sk-realclients-not-a-key' }),
      stderr: 'pipe',
    });
    let stderr = '';
    transport.stderr?.on('data', (b) => {
      stderr += b;
    });
    try {
      await client.connect(transport);
      const tools = await client.listTools();
      assert.deepEqual(tools.tools.map((t) => t.name).sort(), grantTools(grantFile), stderr);
      const read = await client.callTool({ name: 'read_protected_document', arguments: { documentId: 'proposal-aurora' } });
      assert.notEqual(read.isError, true, `the agent's read was refused: ${JSON.stringify(read.structuredContent)}`);
      assert.ok(read.content.some((c) => c.type === 'text' && c.text.includes('Aurora')));
    } finally {
      await client.close();
    }
    const audit = readFileSync(auditFile, 'utf8');
    assert.match(audit, /"tool":"read_protected_document"/);
  });

  test('no model call was made', () => {
    assert.deepEqual(model.requests, []);
  });

  // codexExec runs `codex exec` with the scripted model's call of
  // read_protected_document against the printed HTTP block, alice's token
  // in PDMCP_TOKEN (bearer_token_env_var), and returns what Codex handed
  // the model as the tool result.
  async function codexExec(t, documentId) {
    const scripted = await startModel();
    t.after(() => scripted.close());
    const token = await devToken('alice');
    const block = printedCodexBlock().split('\n');
    const urlAt = block.findIndex((l) => l.startsWith('url = '));
    block.splice(urlAt + 1, 0, 'bearer_token_env_var = "PDMCP_TOKEN"');
    const config = [
      'model = "scripted"',
      'model_provider = "scripted"',
      'approval_policy = "never"',
      'sandbox_mode = "read-only"',
      '',
      '[model_providers.scripted]',
      'name = "scripted model"',
      `base_url = "${scripted.url}/v1"`,
      'wire_api = "responses"',
      'env_key = "SCRIPTED_MODEL_KEY"',
      '',
      ...block,
      '',
    ].join('\n');
    const codexHome = path.join(root, `codex-exec-${Math.random().toString(36).slice(2)}`);
    mkdirSync(codexHome);
    writeFileSync(path.join(codexHome, 'config.toml'), config);
    const env = cleanEnv({
      HOME: dirs.home,
      CODEX_HOME: codexHome,
      SSL_CERT_FILE: info.caFile,
      PDMCP_TOKEN: token,
      SCRIPTED_MODEL_KEY: 'scripted-model-not-a-key',
    });
    const r = await run(bin('codex'), ['exec', '--skip-git-repo-check', '--json',
      callPrompt('read_protected_document', { documentId })], { env, cwd: dirs.work, timeoutMs: 150_000 });
    assert.equal(r.code, 0, describeRun('codex exec', r));
    const tool = `mcp__${info.serverName.replace(/-/g, '_')}__read_protected_document`;
    assert.deepEqual(scripted.calls, [{ tool, args: { documentId } }], describeRun('codex exec', r));
    assert.equal(scripted.toolResults.length, 1, mask(JSON.stringify(scripted.toolResults)));
    // Codex's own account of the call: an MCP tool call on this server,
    // completed, and the model's closing answer.
    const events = r.stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
    const calls = events.filter((e) => e.type === 'item.completed' && e.item?.type === 'mcp_tool_call');
    assert.equal(calls.length, 1, describeRun('codex exec', r));
    assert.equal(calls[0].item.server, info.serverName);
    assert.equal(calls[0].item.tool, 'read_protected_document');
    assert.ok(events.some((e) => e.type === 'item.completed' && e.item?.type === 'agent_message' && e.item.text === 'done'),
      describeRun('codex exec', r));
    return { given: scripted.toolResults[0].content, item: calls[0].item };
  }

  test('codex exec: the model gets the untrusted notice, then the document text', { timeout: 240_000 }, async (t) => {
    const { given } = await codexExec(t, 'proposal-aurora');
    assertNoticeThenText(given, 'proposal-aurora', 'Supplier proposal: Aurora Components Ltd.');
    // Codex hands over the structuredContent: its notice field comes
    // before the text, and the text is the document's.
    const text = typeof given === 'string' ? given : JSON.stringify(given);
    const json = JSON.parse(text.slice(text.indexOf('{')));
    assert.deepEqual(Object.keys(json).slice(0, 1), ['notice'], mask(text.slice(0, 3000)));
    assert.match(json.notice, /^Untrusted document content follows: document proposal-aurora /);
    assert.match(json.text, /^Supplier proposal: Aurora Components Ltd\./);
    assert.equal(json.untrusted, true);
  });

  test('codex exec: the model gets a refusal\'s code, and nothing reached the Gateway', { timeout: 240_000 }, async (t) => {
    const before = await gatewayCounts(info);
    const { given, item } = await codexExec(t, 'no-such-doc');
    assertRefusalCode(given, { layer: 'adapter', code: 'DOCUMENT_NOT_IN_GRANT' });
    assert.ok(!JSON.stringify(item.result ?? {}).includes('structured_content":{'), 'a refusal carried structuredContent');
    assert.deepEqual(await gatewayCounts(info), before, 'an adapter refusal sent a request to the Gateway');
  });
});

function escape(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
