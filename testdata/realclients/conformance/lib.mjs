// What conformance.test.mjs and conformance-next.test.mjs share: running a
// conformance suite's CLI against `pdmcp dev` as alice, reading its
// per-scenario results, and checking README.md's scenario lists.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { before } from 'node:test';

import { cleanEnv, devInfo, devToken, here, run, tempDir } from '../lib.mjs';

const preload = path.join(here, 'conformance', 'preload.mjs');

// conformanceSuite, called inside a describe, fetches alice's token before
// its tests and returns the stack's info, the token and conformance(t,
// args), which runs the suite's CLI (suiteBin under node, with preload.mjs
// adding the bearer token) in a fresh folder named after prefix.
export function conformanceSuite({ node, suiteBin, prefix }) {
  const s = {};
  before(async () => {
    s.info = devInfo();
    s.token = await devToken('alice');
  });
  s.conformance = (t, args, { bearer = s.token } = {}) => {
    const cwd = tempDir(t, prefix);
    const env = cleanEnv({
      HOME: cwd,
      NODE_EXTRA_CA_CERTS: s.info.caFile,
      PDMCP_CONFORMANCE_URL: s.info.mcpUrl,
      PDMCP_CONFORMANCE_TOKEN: bearer,
      NO_COLOR: '1',
    });
    return run(node, ['--import', preload, suiteBin, ...args], { env, cwd, timeoutMs: 240_000 })
      .then((r) => ({ ...r, cwd }));
  };
  return s;
}

// results reads each scenario's checks.json from the suite's output folder
// (one folder per scenario, named server-<scenario>-<time>).
export function results(dir) {
  const out = {};
  for (const d of readdirSync(dir)) {
    const m = /^server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z$/.exec(d);
    if (!m) continue;
    out[m[1]] = JSON.parse(readFileSync(path.join(dir, d, 'checks.json'), 'utf8'));
  }
  return out;
}

// assertReadmeLists checks that README.md, from the heading from on (or
// from its start), names the same scenarios under "Applicable (must
// pass):" and "Not applicable (why):" as applicable and notApplicable; the
// second list ends where README.md names testFile.
export function assertReadmeLists({ from = '', testFile, applicable, notApplicable }) {
  const readme = readFileSync(path.join(here, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf(from));
  const part = (a, b) => section.slice(section.indexOf(a), section.indexOf(b));
  const named = (text) => [...new Set([...text.matchAll(/`([a-z0-9-]+)`/g)].map((m) => m[1]))]
    .filter((n) => n in applicable || n in notApplicable);
  assert.deepEqual(named(part('Applicable (must pass):', 'Not applicable (why):')).sort(), Object.keys(applicable).sort());
  assert.deepEqual(named(part('Not applicable (why):', `\`${testFile}\` keeps`)).sort(),
    Object.keys(notApplicable).sort());
}
