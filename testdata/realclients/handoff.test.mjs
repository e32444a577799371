// The MCP TypeScript SDK's client confirming a hand-off through its
// elicitation handler, against `pdmcp dev`: the patient's step
// "referral-confirmed" asks the host's user before anything is granted.
// Accepted, the doctor gets the sections (list shows the step open) and
// close_step takes them back; declined, the call is refused
// CONFIRMATION_DECLINED; a client without the capability is refused
// CONFIRMATION_UNAVAILABLE.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

import { devInfo, devToken, mask } from './lib.mjs';

const step = 'referral-confirmed';

// connect signs the patient's client in with a development token and, when
// answer is given, declares elicitation and answers every question with it.
async function connect(token, answer, asked) {
  const info = devInfo();
  const client = new Client({ name: 'pdmcp-handoff-test', version: '1' },
    answer ? { capabilities: { elicitation: { form: {} } } } : {});
  if (answer) {
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
      asked.push(req.params);
      return answer;
    });
  }
  const transport = new StreamableHTTPClientTransport(new URL(info.mcpUrl), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  return client;
}

// refusal is the refusal JSON of an isError result (its last text block;
// a sentence naming the code comes first).
function refusal(res) {
  assert.equal(res.isError, true, mask(JSON.stringify(res)));
  const texts = res.content.filter((c) => c.type === 'text').map((c) => c.text);
  return JSON.parse(texts[texts.length - 1]);
}

function stepOf(list) {
  const steps = list.structuredContent?.steps ?? [];
  return steps.find((s) => s.stepId === step);
}

describe('TypeScript SDK elicitation handler confirms a hand-off', () => {
  test('without the capability: CONFIRMATION_UNAVAILABLE', async () => {
    const client = await connect(await devToken('patient'));
    try {
      const r = refusal(await client.callTool({ name: 'hand_off', arguments: { stepId: step } }));
      assert.equal(r.layer, 'adapter');
      assert.equal(r.code, 'CONFIRMATION_UNAVAILABLE');
    } finally {
      await client.close();
    }
  });

  test('declined: CONFIRMATION_DECLINED, nothing handed', async () => {
    const asked = [];
    const client = await connect(await devToken('patient'), { action: 'decline' }, asked);
    try {
      const r = refusal(await client.callTool({ name: 'hand_off', arguments: { stepId: step } }));
      assert.equal(r.code, 'CONFIRMATION_DECLINED');
      assert.equal(asked.length, 1);
      const s = stepOf(await client.callTool({ name: 'list_approved_documents', arguments: {} }));
      assert.equal(s?.open, false, mask(JSON.stringify(s)));
    } finally {
      await client.close();
    }
  });

  test('accepted: handed, then closed', async () => {
    const asked = [];
    const client = await connect(await devToken('patient'),
      { action: 'accept', content: { confirm: true } }, asked);
    try {
      const res = await client.callTool({ name: 'hand_off', arguments: { stepId: step } });
      assert.notEqual(res.isError, true, mask(JSON.stringify(res)));
      assert.equal(asked.length, 1);
      assert.match(asked[0].message, /read-only/);
      assert.equal(asked[0].requestedSchema.properties.confirm.type, 'boolean');
      assert.equal(res.structuredContent.sections.length, 3);
      const s = stepOf(await client.callTool({ name: 'list_approved_documents', arguments: {} }));
      assert.equal(s?.open, true, mask(JSON.stringify(s)));
      const closed = await client.callTool({ name: 'close_step', arguments: { stepId: step } });
      assert.notEqual(closed.isError, true, mask(JSON.stringify(closed)));
      assert.ok(closed.structuredContent.closedAt);
    } finally {
      await client.close();
    }
  });
});
