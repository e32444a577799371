// A trace from a real client to the key server, read back from a real
// backend: the TypeScript SDK calls read_protected_document with a
// traceparent in _meta, `pdmcp dev` exports its spans over OTLP/HTTP to
// Jaeger (run.sh starts both), and Jaeger's query API must hold one trace
// with the client's span as the server span's parent, the server's spans
// with the MCP conventions' attributes (the JSON-RPC id among them), the Gateway request's span under
// it, a refusal as tool_error, and no token, document text or subject
// anywhere in it.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { devInfo, devToken, mask } from '../lib.mjs';

const query = process.env.JAEGER_QUERY_URL;
const service = process.env.OTEL_SERVICE_NAME;

// tags is a Jaeger span's tags as an object.
function tags(span) {
  return Object.fromEntries((span.tags ?? []).map((t) => [t.key, t.value]));
}

// waitForTrace polls Jaeger until the trace holds what done() wants (the
// batch exporter sends every few seconds), 90 s at most.
async function waitForTrace(traceId, done) {
  const deadline = Date.now() + 90_000;
  let last = 'no answer yet';
  while (Date.now() < deadline) {
    const r = await fetch(`${query}/api/traces/${traceId}`);
    if (r.ok) {
      const body = await r.json();
      const trace = body.data?.[0];
      if (trace && done(trace)) return trace;
      last = trace ? `${trace.spans.length} spans: ${trace.spans.map((s) => s.operationName).join(', ')}` : 'no trace';
    } else {
      last = `HTTP ${r.status}`;
    }
    await new Promise((res) => setTimeout(res, 1000));
  }
  throw new Error(`Jaeger never held the whole trace ${traceId}: ${last}`);
}

describe('a tool call traced into Jaeger', () => {
  test('the client parent, the server spans and the Gateway span in one trace', { timeout: 180_000 }, async () => {
    assert.ok(query, 'JAEGER_QUERY_URL is not set: run this through tracing/run.sh');
    const info = devInfo();
    const token = await devToken('alice');
    const client = new Client({ name: 'pdmcp-tracing-ci', version: '1' });
    await client.connect(new StreamableHTTPClientTransport(new URL(info.mcpUrl),
      { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
    const traceId = randomBytes(16).toString('hex');
    const readParent = randomBytes(8).toString('hex');
    const refusedParent = randomBytes(8).toString('hex');
    let docText;
    try {
      const read = await client.callTool({ name: 'read_protected_document', arguments: { documentId: 'proposal-aurora' },
        _meta: { traceparent: `00-${traceId}-${readParent}-01`, tracestate: 'ci=1' } });
      assert.ok(!read.isError, mask(`the read was refused: ${JSON.stringify(read.content)}`));
      docText = read.structuredContent?.text ?? read.content.map((c) => c.text ?? '').join('\n');
      assert.ok(docText.length > 60, 'the read returned no document text');
      const refused = await client.callTool({ name: 'read_protected_document', arguments: { documentId: 'no-such-doc' },
        _meta: { traceparent: `00-${traceId}-${refusedParent}-01` } });
      assert.ok(refused.isError, 'a read of a document outside the grant was not refused');
    } finally {
      await client.close();
    }

    const name = 'tools/call read_protected_document';
    const trace = await waitForTrace(traceId, (t) =>
      t.spans.filter((s) => s.operationName === name).length >= 2 &&
      t.spans.some((s) => s.operationName === 'POST /api/v1/crypto/decrypt'));
    const byId = new Map(trace.spans.map((s) => [s.spanID, s]));
    const calls = trace.spans.filter((s) => s.operationName === name);
    const parentOf = (s) => s.references?.find((r) => r.refType === 'CHILD_OF')?.spanID;
    const read = calls.find((s) => parentOf(s) === readParent);
    const refusedSpan = calls.find((s) => parentOf(s) === refusedParent);
    assert.ok(read, `no server span is the client's read span's child: ${JSON.stringify(calls.map((s) => s.references))}`);
    assert.ok(refusedSpan, 'no server span is the client\'s refused read span\'s child');
    assert.equal(trace.processes[read.processID].serviceName, service);

    const t = tags(read);
    assert.equal(t['span.kind'], 'server');
    assert.equal(t['mcp.method.name'], 'tools/call');
    assert.equal(t['gen_ai.tool.name'], 'read_protected_document');
    assert.equal(t['gen_ai.operation.name'], 'execute_tool');
    assert.equal(t['network.transport'], 'tcp');
    assert.ok(t['mcp.protocol.version'], 'no mcp.protocol.version');
    assert.equal(t['pdmcp.outcome'], 'ok');
    assert.equal(t['pdmcp.document.id'], 'proposal-aurora');
    assert.match(String(t['pdmcp.caller']), /^[0-9a-f]{12}$/);
    assert.equal(t['error.type'], undefined);
    // The SDK numbers its requests upwards: the read's id, then the refused call's.
    assert.match(String(t['jsonrpc.request.id']), /^\d+$/, 'the read\'s span has no numeric jsonrpc.request.id');

    const r = tags(refusedSpan);
    assert.equal(r['error.type'], 'tool_error');
    assert.equal(r['pdmcp.refusal.layer'], 'adapter');
    assert.ok(r['pdmcp.refusal.code'], 'the refusal has no code');
    assert.notEqual(r.error, true, 'a refusal was marked a span error');
    assert.ok(Number(r['jsonrpc.request.id']) > Number(t['jsonrpc.request.id']),
      `the refused call's jsonrpc.request.id ${r['jsonrpc.request.id']} does not follow the read's ${t['jsonrpc.request.id']}`);

    // The Gateway's request descends from the read's span.
    const under = (s, top) => {
      for (let i = 0; s && i < 10; i++) {
        const p = parentOf(s);
        if (p === top.spanID) return true;
        s = byId.get(p);
      }
      return false;
    };
    const decrypt = trace.spans.find((s) => s.operationName === 'POST /api/v1/crypto/decrypt' && under(s, read));
    assert.ok(decrypt, 'no Gateway decrypt span under the read');
    const d = tags(decrypt);
    assert.equal(d['span.kind'], 'client');
    assert.equal(d['pdmcp.gateway.route'], '/api/v1/crypto/decrypt');
    assert.equal(String(d['http.response.status_code']), '200');

    // Nothing forbidden anywhere in what Jaeger holds.
    const all = JSON.stringify(trace);
    const middle = docText.slice(Math.floor(docText.length / 2), Math.floor(docText.length / 2) + 24);
    for (const [what, bad] of [['the access token', token], ['a JWT', 'eyJ'], ['the document text', middle], ['the subject', 'alice']]) {
      assert.ok(!all.includes(bad), `the trace holds ${what}`);
    }
  });
});
