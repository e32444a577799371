// The MCP Inspector's CLI against `pdmcp dev` over Streamable HTTP, with
// alice's access token from `pdmcp dev token` as a bearer header and the
// development CA trusted through NODE_EXTRA_CA_CERTS.
import assert from 'node:assert/strict';
import path from 'node:path';
import { before, describe, test } from 'node:test';

import {
  assertRefusalCode, auditLines, bin, cleanEnv, describeRun, devInfo, devToken, gatewayCounts, grantTools, newAuditLines, run,
  secret, tempDir,
} from './lib.mjs';

describe('MCP Inspector CLI', () => {
  let info;
  let token;
  before(async () => {
    info = devInfo();
    token = await devToken('alice');
  });

  // inspector runs the CLI with a home of its own (it keeps a catalog and
  // storage under ~/.mcp-inspector).
  async function inspector(t, args, { trustCA = true } = {}) {
    const home = tempDir(t, 'inspector-home');
    const env = cleanEnv({ HOME: home, MCP_CATALOG_PATH: path.join(home, 'mcp.json') });
    if (trustCA) env.NODE_EXTRA_CA_CERTS = info.caFile;
    return run(process.execPath, [bin('inspector'), '--cli', info.mcpUrl, '--transport', 'http', ...args], {
      env,
      cwd: home,
      timeoutMs: 90_000,
    });
  }

  // readDocument calls read_protected_document on documentId with alice's
  // token.
  function readDocument(t, documentId) {
    return inspector(t, ['--method', 'tools/call', '--tool-name', 'read_protected_document',
      '--tool-arg', `documentId=${documentId}`, '--header', `Authorization: Bearer ${token}`]);
  }

  test('tools/list with a bearer token lists exactly the grant tools', { timeout: 120_000 }, async (t) => {
    const r = await inspector(t, ['--method', 'tools/list', '--header', `Authorization: Bearer ${token}`]);
    assert.equal(r.code, 0, describeRun('inspector tools/list', r));
    const out = JSON.parse(r.stdout);
    const names = out.tools.map((x) => x.name).sort();
    assert.deepEqual(names, grantTools());
    const read = out.tools.find((x) => x.name === 'read_protected_document');
    assert.deepEqual(read.inputSchema.required, ['documentId']);
    assert.equal(read.inputSchema.additionalProperties, false, 'input schemas are closed');
  });

  test('tools/call read_protected_document returns Aurora for alice', { timeout: 120_000 }, async (t) => {
    const r = await readDocument(t, 'proposal-aurora');
    assert.equal(r.code, 0, describeRun('inspector tools/call', r));
    const out = JSON.parse(r.stdout);
    assert.notEqual(out.isError, true, 'the read was refused');
    const text = out.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
    assert.ok(text.includes('Aurora'), 'the document text does not mention Aurora');
    assert.equal(out.structuredContent.provenance.documentId, 'proposal-aurora');
    assert.equal(out.structuredContent.untrusted, true);
  });

  // The CLI lists the tools before it calls one and checks the result
  // against the tool's output schema; before issue 8 it printed the
  // schema error instead of the refusal.
  test('tools/call of a document outside the grant prints a readable refusal', { timeout: 120_000 }, async (t) => {
    const before = await gatewayCounts(info);
    const r = await readDocument(t, 'no-such-doc');
    // The CLI prints the result and exits 5 (tool_is_error) for an isError
    // result; a schema failure is exit 1 with nothing on stdout.
    assert.equal(r.code, 5, describeRun('inspector tools/call no-such-doc', r));
    assert.match(r.stderr, /"code":"tool_is_error"/, describeRun('inspector tools/call no-such-doc', r));
    const out = JSON.parse(r.stdout);
    assert.equal(out.isError, true, r.stdout);
    assertRefusalCode(out.content, { layer: 'adapter', code: 'DOCUMENT_NOT_IN_GRANT' });
    assert.deepEqual(await gatewayCounts(info), before, 'an adapter refusal sent a request to the Gateway');
  });

  test('a token the provider never issued is refused', { timeout: 120_000 }, async (t) => {
    // A well-formed JWT whose signature is not the provider's.
    const [h, p] = token.split('.');
    const forged = secret(`${h}.${p}.${Buffer.from('not the signature').toString('base64url')}`);
    const seen = auditLines(info).length;
    const r = await inspector(t, ['--method', 'tools/list', '--header', `Authorization: Bearer ${forged}`]);
    assert.notEqual(r.code, 0, describeRun('inspector tools/list with a forged token', r));
    assert.ok(!r.stdout.includes('read_protected_document'), 'a forged token listed tools');
    // The server's audit file says why.
    const refused = newAuditLines(info, seen).filter((l) => l.event === 'auth-refused');
    assert.ok(refused.some((l) => l.reason === 'SIGNATURE_INVALID'), `audit: ${JSON.stringify(refused)}`);
  });

  test('without the development CA the connection fails', { timeout: 120_000 }, async (t) => {
    const r = await inspector(t, ['--method', 'tools/list', '--header', `Authorization: Bearer ${token}`], {
      trustCA: false,
    });
    assert.notEqual(r.code, 0, describeRun('inspector without the CA', r));
    assert.ok(!r.stdout.includes('read_protected_document'));
    assert.match(r.stdout + r.stderr, /certificate/);
  });
});
