// Shared helpers for the real-client tests: where the running `pdmcp dev`
// is, how to run a client with a clean environment and bounded time, a
// scripted sign-in at the development provider, and masking of secrets so
// no token ever reaches the test output.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

export const here = path.dirname(fileURLToPath(import.meta.url));

/** The path of an installed client's executable (node_modules/.bin). */
export function bin(name) {
  return path.join(here, 'node_modules', '.bin', name);
}

function required(name) {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set: run these tests through testdata/realclients/run.sh`);
  }
  return v;
}

/** dev.json of the running `pdmcp dev`. */
export function devInfo() {
  return JSON.parse(readFileSync(required('PDMCP_DEV_JSON'), 'utf8'));
}

/** What `pdmcp dev` printed on its standard output. */
export function devOutput() {
  return readFileSync(required('PDMCP_DEV_OUT'), 'utf8');
}

/**
 * The lines `pdmcp dev` printed after the first line isHeading accepts, up
 * to the next blank line, each trimmed; what names the block when there is
 * none.
 */
export function devPrintedBlock(isHeading, what) {
  const lines = devOutput().split('\n');
  const start = lines.findIndex(isHeading);
  assert.ok(start >= 0, `pdmcp dev printed no ${what} block`);
  const block = [];
  for (const l of lines.slice(start + 1)) {
    if (l.trim() === '') break;
    block.push(l.trim());
  }
  return block;
}

export const pdmcpBin = () => required('PDMCP_BIN');
export const stateDir = () => required('PDMCP_STATE');

export function user(info, name) {
  const u = info.users.find((x) => x.name === name);
  if (!u) throw new Error(`dev.json has no user ${name}`);
  return u;
}

// Secrets registered here are replaced in everything run() returns and in
// every message built with mask(), so a failing assertion never prints one.
const secrets = new Set();

export function secret(s) {
  if (s) secrets.add(s);
  return s;
}

export function mask(s) {
  let out = String(s);
  for (const x of secrets) out = out.split(x).join('<redacted>');
  return out;
}

/**
 * A fresh folder under TMPDIR (run.sh points TMPDIR into its own temp
 * folder, removed at its end), removed after test t when t is given.
 */
export function tempDir(t, prefix) {
  const d = mkdtempSync(path.join(os.tmpdir(), `${prefix}-`));
  t?.after(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

/**
 * A fresh folder (tempDir) holding one empty folder per entry of names,
 * which maps a key of dirs to the folder's name: a host's home, config and
 * working folders.
 */
export function hostDirs(t, prefix, names = { home: 'home', work: 'work' }) {
  const root = tempDir(t, prefix);
  const dirs = Object.fromEntries(Object.entries(names).map(([k, n]) => [k, path.join(root, n)]));
  for (const d of Object.values(dirs)) mkdirSync(d);
  return { root, dirs };
}

/**
 * What a host test that signs in with a bearer header starts from: the
 * running stack's info, alice's token and a fresh home and working folder
 * under root (the caller removes root).
 */
export async function aliceHome(prefix) {
  return { info: devInfo(), token: await devToken('alice'), ...hostDirs(null, prefix) };
}

export function removeDir(d) {
  if (d) rmSync(d, { recursive: true, force: true });
}

/**
 * The environment a client gets: only PATH and a temporary folder, plus
 * what the test names. No model credential, no proxy, nothing from the
 * caller's home.
 */
export function cleanEnv(extra = {}) {
  return { PATH: process.env.PATH, TMPDIR: os.tmpdir(), LANG: 'C.UTF-8', ...extra };
}

// Each client runs in a process group of its own, so that a timeout, or
// this test process ending early, stops everything the client started
// (Codex's launcher starts its native binary as a child, for instance).
const liveGroups = new Set();

function killGroup(pid) {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

process.on('exit', () => {
  for (const pid of liveGroups) killGroup(pid);
});
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.once(sig, () => {
    for (const pid of liveGroups) killGroup(pid);
    process.exit(128 + (sig === 'SIGINT' ? 2 : 15));
  });
}

/**
 * Starts a command (killing its whole process group after timeoutMs) with
 * stdin open. Returns { write(s), waitFor(re), done }: waitFor resolves
 * with the match once the combined output matches re (and rejects when
 * the command ends first); done resolves as run() does. Every registered
 * secret is masked in what done returns.
 */
export function start(cmd, args, { env, cwd, timeoutMs = 120_000 } = {}) {
  const child = spawn(cmd, args, { env: env ?? cleanEnv(), cwd, stdio: ['pipe', 'pipe', 'pipe'], detached: true });
  if (child.pid) liveGroups.add(child.pid);
  const out = [];
  const err = [];
  let combined = '';
  const waiters = [];
  const check = () => {
    for (const w of [...waiters]) {
      const m = w.re.exec(combined);
      if (m) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(m);
      }
    }
  };
  child.stdout.on('data', (b) => {
    out.push(b);
    combined += b;
    check();
  });
  child.stderr.on('data', (b) => {
    err.push(b);
    combined += b;
    check();
  });
  child.stdin.on('error', () => {});
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    killGroup(child.pid);
  }, timeoutMs);
  const done = new Promise((resolve, reject) => {
    child.on('error', (e) => {
      clearTimeout(timer);
      liveGroups.delete(child.pid);
      reject(new Error(`start ${path.basename(cmd)}: ${e.message}`));
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      liveGroups.delete(child.pid);
      const r = {
        code,
        signal,
        timedOut,
        rawStdout: Buffer.concat(out).toString('utf8'),
        stdout: mask(Buffer.concat(out).toString('utf8')),
        stderr: mask(Buffer.concat(err).toString('utf8')),
      };
      Object.defineProperty(r, 'rawStdout', { enumerable: false });
      for (const w of waiters.splice(0)) w.reject(new Error(`${path.basename(cmd)} ended before printing ${w.re}:\n${describeRun(path.basename(cmd), r)}`));
      resolve(r);
    });
  });
  return {
    write: (s) => child.stdin.write(s),
    end: () => child.stdin.end(),
    kill: () => killGroup(child.pid),
    waitFor: (re) => new Promise((resolve, reject) => {
      waiters.push({ re, resolve, reject });
      check();
    }),
    done,
  };
}

/**
 * Runs a command to completion (or kills its whole process group after
 * timeoutMs) and returns its exit code and output, with every registered
 * secret masked. stdin is empty.
 */
export async function run(cmd, args, opts = {}) {
  const p = start(cmd, args, opts);
  p.end();
  return p.done;
}

/** A one-line description of a run for assertion messages (masked). */
export function describeRun(name, r) {
  return `${name}: exit ${r.code}${r.signal ? ` (signal ${r.signal})` : ''}${r.timedOut ? ' (timed out)' : ''}\n` +
    `--- stdout\n${r.stdout.slice(0, 4000)}\n--- stderr\n${r.stderr.slice(0, 4000)}`;
}

/** An access token for a development user, from `pdmcp dev token`. */
export async function devToken(name) {
  const r = await run(pdmcpBin(), ['dev', 'token', name, '--state', stateDir()], { timeoutMs: 60_000 });
  const tok = r.rawStdout.trim();
  if (r.code !== 0 || !tok) {
    throw new Error(describeRun(`pdmcp dev token ${name}`, r));
  }
  return secret(tok);
}

/**
 * A loopback HTTP server that records every request and answers 503; a
 * client's model endpoint is pointed here so the test can assert that no
 * model call was made.
 */
export async function startRecorder() {
  const requests = [];
  const server = http.createServer((req, res) => {
    requests.push(`${req.method} ${req.url}`);
    res.writeHead(503, { 'content-type': 'text/plain' });
    res.end('no model here\n');
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

/**
 * Signs a user in at the development provider the way a person in a
 * browser would, without a browser: GETs the authorization URL, follows
 * redirects to the sign-in form, fills username and password (keeping the
 * form's hidden inputs), POSTs it, and follows redirects until one points
 * at redirectUri. Nothing is sent there: the code and state are read from
 * the Location header. Returns { code, state }, or throws with the page's
 * alert when the provider shows the form again. The process must trust the
 * provider's CA (NODE_EXTRA_CA_CERTS). Also returns the whole redirect URL
 * (callback, for a host whose own listener must receive it) and its iss.
 * The provider's cookies are kept for the sign-in, so Keycloak's own login
 * page works the same way.
 */
export async function scriptedSignIn(authorizationUrl, { username, password, redirectUri }) {
  const target = new URL(redirectUri);
  const isTarget = (u) => u.origin === target.origin && u.pathname === target.pathname;
  const providerOrigin = new URL(authorizationUrl).origin;
  // The browser's cookies for the provider: Keycloak keeps the sign-in's
  // state in them between the form and its POST.
  const cookies = new Map();
  const keepCookies = (res) => {
    for (const c of res.headers.getSetCookie?.() ?? []) {
      const [pair, ...attrs] = c.split(';');
      const eq = pair.indexOf('=');
      if (eq <= 0) continue;
      const name = pair.slice(0, eq).trim();
      const gone = attrs.some((a) => /^\s*max-age\s*=\s*(0|-)/i.test(a)) ||
        attrs.some((a) => /^\s*expires\s*=/i.test(a) && Date.parse(a.split('=').slice(1).join('=')) < Date.now());
      if (gone) cookies.delete(name);
      else cookies.set(name, pair.slice(eq + 1).trim());
    }
  };

  // follow requests url (GET, or POST with a form) and follows redirects
  // until a page, or the redirect to the loopback URI.
  async function follow(url, init) {
    let next = new URL(url);
    for (let hops = 0; hops < 10; hops++) {
      const headers = { ...(init.headers ?? {}) };
      if (cookies.size) headers.cookie = [...cookies].map(([k, v]) => `${k}=${v}`).join('; ');
      const res = await fetch(next, { ...init, headers, redirect: 'manual' });
      keepCookies(res);
      if (res.status >= 300 && res.status < 400) {
        await res.arrayBuffer();
        const loc = res.headers.get('location');
        if (!loc) throw new Error(`redirect without Location from ${next.origin}${next.pathname}`);
        const to = new URL(loc, next);
        if (isTarget(to)) return { callback: to };
        if (to.origin !== providerOrigin) {
          throw new Error(`sign-in redirected away from the provider, to ${to.origin}${to.pathname}`);
        }
        next = to;
        init = { method: 'GET' };
        continue;
      }
      const body = await res.text();
      if (res.status !== 200) {
        throw new Error(`${next.origin}${next.pathname} answered ${res.status}`);
      }
      return { page: body, url: next };
    }
    throw new Error('too many redirects during sign-in');
  }

  let step = await follow(authorizationUrl, { method: 'GET' });
  if (!step.callback) {
    const form = parseSignInForm(step.page, step.url);
    if (form.action.origin !== providerOrigin) {
      throw new Error(`the sign-in form posts to ${form.action.origin}, not to the provider`);
    }
    form.values.set('username', username);
    form.values.set('password', password);
    step = await follow(form.action, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: form.values.toString(),
    });
    if (!step.callback) {
      // The development provider's alert, or Keycloak's input error.
      const alert = /(?:role="alert"|id="input-error")[^>]*>([^<]*)</i.exec(step.page);
      throw new Error(`sign-in refused: ${alert ? alert[1].trim() : 'the provider showed a page, not a redirect'}`);
    }
  }
  const q = step.callback.searchParams;
  if (q.get('error')) {
    throw new Error(`authorization refused: ${q.get('error')} ${q.get('error_description') ?? ''}`);
  }
  const code = q.get('code');
  if (!code) throw new Error('the redirect carries no code');
  secret(step.callback.href);
  return { code: secret(code), state: q.get('state'), callback: step.callback.href, iss: q.get('iss') };
}

// parseSignInForm finds the POST form with a password input and collects
// its hidden inputs. It reads the development provider's plain HTML; it is
// not a general HTML parser.
function parseSignInForm(html, base) {
  const attrs = (s) => {
    const out = {};
    for (const m of s.matchAll(/([a-zA-Z][\w:-]*)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))/g)) {
      out[m[1].toLowerCase()] = decodeEntities(m[2] ?? m[3] ?? m[4] ?? '');
    }
    return out;
  };
  for (const f of html.matchAll(/<form\b([^>]*)>([\s\S]*?)<\/form>/gi)) {
    const fa = attrs(f[1]);
    if ((fa.method ?? '').toLowerCase() !== 'post') continue;
    const values = new URLSearchParams();
    let hasPassword = false;
    for (const i of f[2].matchAll(/<input\b([^>]*)>/gi)) {
      const ia = attrs(i[1]);
      if (ia.name === 'password') hasPassword = true;
      else if ((ia.type ?? '').toLowerCase() === 'hidden' && ia.name) values.set(ia.name, ia.value ?? '');
    }
    if (hasPassword) return { action: new URL(fa.action ?? '', base), values };
  }
  throw new Error(`no sign-in form at ${base.origin}${base.pathname}`);
}

function decodeEntities(s) {
  return s
    .replace(/&#(\d+);/g, (_, n) => String.fromCodePoint(Number(n)))
    .replace(/&#x([0-9a-f]+);/gi, (_, n) => String.fromCodePoint(parseInt(n, 16)))
    .replace(/&quot;/g, '"')
    .replace(/&#39;|&apos;/g, "'")
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&amp;/g, '&');
}

/**
 * The tools a grant file allows, sorted (by default the grant `pdmcp dev`
 * serves over HTTP). A server must offer exactly these; the three the
 * document tests use must be among them.
 */
export function grantTools(file = devInfo().grant) {
  const tools = [...JSON.parse(readFileSync(file, 'utf8')).allowedTools].sort();
  for (const t of ['list_approved_documents', 'read_protected_document', 'save_protected_result']) {
    assert.ok(tools.includes(t), `the grant ${file} does not allow ${t}`);
  }
  return tools;
}

/** The server's audit file, one parsed object per line. */
export function auditLines(info) {
  return readFileSync(info.audit, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

/**
 * How a client or auth-refused audit line names a development user: the
 * first 12 hex digits of the sha256 of their id, issuer|subject.
 */
export function callerDigest(info, name) {
  return createHash('sha256').update(`${info.issuer}|${name}`).digest('hex').slice(0, 12);
}

/** The audit lines written after the first `seen` ones. */
export function newAuditLines(info, seen) {
  return auditLines(info).slice(seen);
}

/**
 * What a host handed its model as a tool result (a string, content blocks,
 * a JSON object or a JSON string of one), as plain text in reading order:
 * strings that hold JSON are opened, objects give their values in key
 * order. Keys are left out; the model reads values.
 */
export function flattenText(value) {
  if (value == null) return '';
  if (typeof value === 'string') {
    const s = value.trim();
    if ((s.startsWith('{') && s.endsWith('}')) || (s.startsWith('[') && s.endsWith(']'))) {
      try {
        return flattenText(JSON.parse(s));
      } catch {
        return value;
      }
    }
    return value;
  }
  if (Array.isArray(value)) return value.map(flattenText).join('\n');
  if (typeof value === 'object') return Object.values(value).map(flattenText).join('\n');
  return String(value);
}

/**
 * Every object inside a tool result as handed to a model: JSON strings are
 * opened, and so is every JSON value embedded in prose (hosts wrap results
 * in their own text: Copilot CLI writes "MCP server '<name>': " before a
 * refused call's text, Gemini CLI reports an isError result as a sentence
 * with the result's JSON in it).
 */
export function objectsIn(value, out = []) {
  if (typeof value === 'string') {
    for (const v of jsonValuesIn(value)) objectsIn(v, out);
  } else if (Array.isArray(value)) {
    for (const v of value) objectsIn(v, out);
  } else if (value && typeof value === 'object') {
    out.push(value);
    for (const v of Object.values(value)) objectsIn(v, out);
  }
  return out;
}

// jsonValuesIn finds the JSON objects and arrays written out in s: from
// each { or [, the balanced span (strings and escapes respected) that
// parses; the scan goes on after it.
function jsonValuesIn(s) {
  const found = [];
  for (let i = 0; i < s.length; i++) {
    if (s[i] !== '{' && s[i] !== '[') continue;
    let depth = 0;
    let inString = false;
    let end = -1;
    for (let j = i; j < s.length; j++) {
      const ch = s[j];
      if (inString) {
        if (ch === '\\') j++;
        else if (ch === '"') inString = false;
      } else if (ch === '"') inString = true;
      else if (ch === '{' || ch === '[') depth++;
      else if (ch === '}' || ch === ']') {
        depth--;
        if (depth === 0) {
          end = j;
          break;
        }
      }
    }
    if (end < 0) continue;
    try {
      found.push(JSON.parse(s.slice(i, end + 1)));
      i = end;
    } catch {
      // not JSON from here; try the next bracket
    }
  }
  return found;
}

// "Untrusted ..." and, soon after, "do not follow" (or never/obey): the
// notice's sense, not its exact wording.
const NOTICE = /untrusted[^]{0,400}?(?:do not|don't|never)\s+(?:follow|obey)/i;

/**
 * The model was handed the untrusted-content notice (naming the document)
 * before the document's text, whose line `marker` must appear.
 */
export function assertNoticeThenText(given, documentId, marker) {
  const text = flattenText(given);
  const show = () => mask(text.slice(0, 3000));
  const at = text.indexOf(marker);
  assert.ok(at >= 0, `the document text ("${marker}") is not in what the model got:\n${show()}`);
  const before = text.slice(0, at);
  const m = NOTICE.exec(before);
  assert.ok(m, `no untrusted-content notice before the document text in what the model got:\n${show()}`);
  assert.ok(before.includes(documentId), `the notice does not name ${documentId}:\n${show()}`);
}

/**
 * The model was handed a refusal it can read: an object with refused true
 * and the layer and code given (as JSON, in whatever wrapping the host
 * uses), and the schema error of issue 8 nowhere.
 */
export function assertRefusalCode(given, { layer, code }) {
  const show = () => mask(JSON.stringify(given).slice(0, 3000));
  const refusal = objectsIn(given).find((o) => o.refused === true);
  assert.ok(refusal, `no refusal object in what the model got:\n${show()}`);
  assert.equal(refusal.code, code, show());
  assert.equal(refusal.layer, layer, show());
  assert.equal(typeof refusal.detail, 'string', show());
  assert.ok(refusal.detail.length > 0, show());
  assert.ok(!/-32602|does not match the tool's output schema/i.test(JSON.stringify(given)), show());
}

/**
 * The two tests of a host that drives a model: asked to read
 * proposal-aurora, the model gets the untrusted notice, then the document
 * text; asked for a document outside the grant, it gets the refusal's
 * code. reads(t, documentId) is what the host handed its model; each
 * test's name starts with prefix.
 */
export function testModelReads(prefix, reads) {
  const opts = { timeout: 240_000 };
  test(`${prefix}the model gets the untrusted notice, then the document text`, opts, async (t) => {
    assertNoticeThenText(await reads(t, 'proposal-aurora'), 'proposal-aurora', 'Supplier proposal: Aurora Components Ltd.');
  });
  test(`${prefix}the model gets a refusal's code`, opts, async (t) => {
    assertRefusalCode(await reads(t, 'no-such-doc'), { layer: 'adapter', code: 'DOCUMENT_NOT_IN_GRANT' });
  });
}

/**
 * The reference Gateway's per-route request counts (its test control,
 * with the admin credentials `pdmcp dev` keeps in its state folder), to
 * prove that an adapter refusal sent nothing to the Gateway.
 */
export async function gatewayCounts(info) {
  const pw = readFileSync(path.join(stateDir(), 'gateway', 'admin-password'), 'utf8').trim();
  secret(pw);
  const res = await fetch(`${info.gatewayUrl}/api/v1/admin/test/counts`, {
    method: 'POST',
    headers: { authorization: `Basic ${Buffer.from(`admin:${pw}`).toString('base64')}`, 'content-type': 'application/json' },
    body: '{}',
  });
  const body = await res.text();
  if (res.status !== 200) throw new Error(mask(`gateway counts: ${res.status} ${body}`));
  return JSON.parse(body).counts;
}

/**
 * A folder run.sh keeps across its restart of `pdmcp dev`, for hosts whose
 * sign-in the tests after the restart use again.
 */
export function keepDir() {
  return required('PDMCP_KEEP');
}
