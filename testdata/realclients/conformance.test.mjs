// The official MCP conformance suite (@modelcontextprotocol/conformance)
// against `pdmcp dev`, as alice with a bearer token from `pdmcp dev token`.
// The suite has no header option and needs a newer Node than 20:
// conformance/preload.mjs adds the token to its requests and fs.globSync.
//
// Every server scenario the suite knows is listed below, either as one
// that applies to a tools-only server behind a bearer token (it must pass:
// no FAILURE check, at least one SUCCESS) or as one that does not, with
// the reason (README.md repeats the list). A scenario the suite adds in a
// later version is in neither list, and fails the test until it is sorted.
import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, test } from 'node:test';

import { assertReadmeLists, conformanceSuite, results } from './conformance/lib.mjs';
import { describeRun, here, mask, secret } from './lib.mjs';

export const applicable = {
  'server-initialize': 'initialize handshake over Streamable HTTP with the token',
  'ping': 'ping answers {}',
  'logging-set-level': 'logging/setLevel answers {}',
  'tools-list': 'the three grant tools, each with name, description and input schema',
  'server-sse-multiple-streams': 'three concurrent POSTs on one session, each answered on its own SSE stream',
  'dns-rebinding-protection': 'a forged Host/Origin is refused 4xx; 127.0.0.1:<port> as Host and http Origin is served',
};

// Why each of these does not apply. Most call or get a fixture the suite's
// reference server defines (a tool, resource or prompt of that name);
// pdmcp offers only its grant's tools, and refuses any other tool name
// with TOOL_NOT_IN_GRANT as an isError result, which two of them count as
// a pass (tools-call-simple-text, tools-call-error): passes that prove
// nothing, so they are not counted.
export const notApplicable = {
  'completion-complete': 'completion/complete: pdmcp has no prompts or resource templates to complete',
  'resources-list': 'pdmcp declares no resources capability, so resources/list answers -32601 (method not found)',
  'prompts-list': 'pdmcp declares no prompts capability, so prompts/list answers -32601 (method not found)',
  'tools-call-simple-text': 'calls the fixture tool test_simple_text (its "pass" here is the TOOL_NOT_IN_GRANT refusal text)',
  'tools-call-image': 'calls the fixture tool test_image_content; pdmcp returns no images',
  'tools-call-audio': 'calls the fixture tool test_audio_content; pdmcp returns no audio',
  'tools-call-embedded-resource': 'calls the fixture tool test_embedded_resource; pdmcp has no resources',
  'tools-call-mixed-content': 'calls the fixture tool test_multiple_content_types',
  'tools-call-with-logging': 'calls the fixture tool test_tool_with_logging; pdmcp sends no log notifications',
  'tools-call-error': 'calls the fixture tool test_error_handling (its "pass" is the TOOL_NOT_IN_GRANT refusal); refusals are tested in sdk, inspector and the hosts',
  'tools-call-with-progress': 'calls the fixture tool test_tool_with_progress; pdmcp sends no progress notifications',
  'tools-call-sampling': 'calls the fixture tool test_sampling; pdmcp never asks the client to sample',
  'tools-call-elicitation': 'calls the fixture tool test_elicitation; pdmcp never elicits',
  'json-schema-2020-12': 'looks for the fixture tool json_schema_2020_12_tool',
  'elicitation-sep1034-defaults': 'needs a tool that elicits; pdmcp never elicits',
  'elicitation-sep1330-enums': 'needs a tool that elicits; pdmcp never elicits',
  'server-sse-polling': 'calls the fixture tool test_reconnection, which must drop its stream mid-call',
  'resources-read-text': 'reads the fixture resource test://static-text; pdmcp has no resources',
  'resources-read-binary': 'reads the fixture resource test://static-binary; pdmcp has no resources',
  'resources-templates-read': 'reads a fixture resource template; pdmcp has no resources',
  'resources-subscribe': 'resources/subscribe: pdmcp has no resources',
  'resources-unsubscribe': 'resources/unsubscribe: pdmcp has no resources',
  'prompts-get-simple': 'gets the fixture prompt test_simple_prompt; pdmcp has no prompts',
  'prompts-get-with-args': 'gets the fixture prompt test_prompt_with_arguments; pdmcp has no prompts',
  'prompts-get-embedded-resource': 'gets the fixture prompt test_prompt_with_embedded_resource; pdmcp has no prompts',
  'prompts-get-with-image': 'gets the fixture prompt test_prompt_with_image; pdmcp has no prompts',
};

const suiteBin = path.join(here, 'node_modules', '@modelcontextprotocol', 'conformance', 'dist', 'index.js');

describe('MCP conformance suite', () => {
  const suite = conformanceSuite({ node: process.execPath, suiteBin, prefix: 'conformance' });
  const conformance = suite.conformance;

  test('the suite lists exactly the server scenarios sorted here', { timeout: 60_000 }, async (t) => {
    const r = await conformance(t, ['list']);
    assert.equal(r.code, 0, describeRun('conformance list', r));
    const server = r.stdout.split('Client scenarios')[0];
    const names = [...server.matchAll(/^\s+- (\S+) \[/gm)].map((m) => m[1]).sort();
    assert.ok(names.length > 20, `too few server scenarios listed: ${names.join(', ')}`);
    assert.deepEqual(names, [...Object.keys(applicable), ...Object.keys(notApplicable)].sort(),
      'a scenario is new or gone: sort it into applicable or notApplicable (and README.md)');
  });

  test('README.md lists the same scenarios as applicable and not', () => {
    assertReadmeLists({ testFile: 'conformance.test.mjs', applicable, notApplicable });
  });

  test('every applicable server scenario passes with alice\'s token', { timeout: 300_000 }, async (t) => {
    const r = await conformance(t, ['server', '--url', suite.info.mcpUrl, '--suite', 'all', '-o', 'results']);
    // The suite exits 1 when any scenario fails; the not-applicable ones
    // do, so its exit status says nothing here. Its per-scenario checks do.
    assert.ok(r.code === 0 || r.code === 1, describeRun('conformance server', r));
    const got = results(path.join(r.cwd, 'results'));
    const failures = [];
    for (const name of Object.keys(applicable)) {
      const checks = got[name];
      if (!checks) {
        failures.push(`${name}: not run`);
        continue;
      }
      const failed = checks.filter((c) => c.status === 'FAILURE');
      for (const c of failed) {
        failures.push(`${name}: ${c.id}: ${c.errorMessage ?? ''} ${JSON.stringify(c.details ?? {}).slice(0, 400)}`);
      }
      if (!checks.some((c) => c.status === 'SUCCESS')) failures.push(`${name}: no check succeeded`);
    }
    assert.deepEqual(failures, [], mask(failures.join('\n')));
  });

  test('the token is what gets the suite in: a wrong one fails server-initialize', { timeout: 120_000 }, async (t) => {
    const wrong = secret(`${suite.token.slice(0, -8)}AAAAAAAA`);
    const r = await conformance(t, ['server', '--url', suite.info.mcpUrl, '--scenario', 'server-initialize', '-o', 'results'],
      { bearer: wrong });
    assert.notEqual(r.code, 0, describeRun('conformance with a wrong token', r));
    const checks = results(path.join(r.cwd, 'results'))['server-initialize'];
    assert.ok(checks?.some((c) => c.status === 'FAILURE' && /invalid_token|401|nauthori/i.test(c.errorMessage ?? '')),
      mask(JSON.stringify(checks)));
  });
});
