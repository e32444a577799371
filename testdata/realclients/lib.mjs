// Shared helpers for the real-client tests: where the running `pdmcp dev`
// is, how to run a client with a clean environment and bounded time, a
// scripted sign-in at the development provider, and masking of secrets so
// no token ever reaches the test output.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
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
 * Runs a command to completion (or kills its whole process group after
 * timeoutMs) and returns its exit code and output, with every registered
 * secret masked. stdin is empty.
 */
export function run(cmd, args, { env, cwd, timeoutMs = 120_000 } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { env: env ?? cleanEnv(), cwd, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    if (child.pid) liveGroups.add(child.pid);
    const out = [];
    const err = [];
    child.stdout.on('data', (b) => out.push(b));
    child.stderr.on('data', (b) => err.push(b));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup(child.pid);
    }, timeoutMs);
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
      // The raw output is for checking that a client did not echo a
      // secret; it is never put in a message.
      Object.defineProperty(r, 'rawStdout', { enumerable: false });
      resolve(r);
    });
  });
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
 * at redirectUri. Nothing listens there: the code and state are read from
 * the Location header. Returns { code, state }, or throws with the page's
 * alert when the provider shows the form again. The process must trust the
 * provider's CA (NODE_EXTRA_CA_CERTS).
 */
export async function scriptedSignIn(authorizationUrl, { username, password, redirectUri }) {
  const target = new URL(redirectUri);
  const isTarget = (u) => u.origin === target.origin && u.pathname === target.pathname;
  const providerOrigin = new URL(authorizationUrl).origin;

  // follow requests url (GET, or POST with a form) and follows redirects
  // until a page, or the redirect to the loopback URI.
  async function follow(url, init) {
    let next = new URL(url);
    for (let hops = 0; hops < 10; hops++) {
      const res = await fetch(next, { ...init, redirect: 'manual' });
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
      const alert = /role="alert"[^>]*>([^<]*)</i.exec(step.page);
      throw new Error(`sign-in refused: ${alert ? alert[1].trim() : 'the provider showed a page, not a redirect'}`);
    }
  }
  const q = step.callback.searchParams;
  if (q.get('error')) {
    throw new Error(`authorization refused: ${q.get('error')} ${q.get('error_description') ?? ''}`);
  }
  const code = q.get('code');
  if (!code) throw new Error('the redirect carries no code');
  return { code: secret(code), state: q.get('state') };
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

/** The tools every dev grant offers over HTTP. */
export const grantTools = ['list_approved_documents', 'read_protected_document', 'save_protected_result'];

/** The tools pdmcp dev's grant allows, sorted, read from the grant it wrote (dev.json names it). */
export function devGrantTools() {
  return JSON.parse(readFileSync(devInfo().grant, 'utf8')).allowedTools.slice().sort();
}

/** The server's audit file, one parsed object per line. */
export function auditLines(info) {
  return readFileSync(info.audit, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

/** The audit lines written after the first `seen` ones. */
export function newAuditLines(info, seen) {
  return auditLines(info).slice(seen);
}
