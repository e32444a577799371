// Loaded with `node --import` into the MCP conformance suite's CLI, which
// is built for a newer Node and has no option for a request header:
//
//  - The suite imports `globSync` from "fs" (Node >= 22). Under an older
//    Node, a resolve hook (hooks.mjs) gives the suite's own imports of "fs"
//    a module that is node:fs plus a small globSync (fs.mjs). Nothing else
//    is redirected. Under Node 22 (conformance-next/) no hook is needed.
//  - Every request the suite sends to the server under test gets
//    `Authorization: Bearer $PDMCP_CONFORMANCE_TOKEN` unless it already
//    has one: global fetch (which the MCP SDK client in the suite uses) and
//    undici's request (which its DNS-rebinding scenario uses, to set Host
//    and Origin). Only requests to the origin of $PDMCP_CONFORMANCE_URL
//    get it.
//  - The header scenarios of 0.2.0 (http-header-validation) send raw
//    requests with node:http's request({hostname, port, path}), dropping
//    the URL's scheme: plain HTTP to a TLS port. Such a request to the
//    server under test's host and port goes out as https.request instead,
//    with the token, headers as the scenario set them.
//  - undici names the TLS peer after the Host header, so the scenario's
//    forged `Host: evil.example.com` would fail certificate verification
//    before the server saw it, and the scenario would test TLS instead of
//    the server's Host check. Its requests verify the certificate against
//    the host of the URL they connect to (what a client that connected to
//    that URL would check), so the forged Host reaches the server.
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { createRequire, register } from 'node:module';
import tls from 'node:tls';

if (typeof fs.globSync !== 'function') register('./hooks.mjs', import.meta.url);

const token = process.env.PDMCP_CONFORMANCE_TOKEN;
const target = process.env.PDMCP_CONFORMANCE_URL;
if (!token || !target) {
  throw new Error('conformance/preload.mjs: PDMCP_CONFORMANCE_TOKEN and PDMCP_CONFORMANCE_URL must be set');
}
const origin = new URL(target).origin;
const auth = `Bearer ${token}`;

function toServer(url) {
  try {
    return new URL(String(url)).origin === origin;
  } catch {
    return false;
  }
}

const realFetch = globalThis.fetch;
globalThis.fetch = function fetchWithToken(input, init) {
  const url = input instanceof Request ? input.url : input;
  if (!toServer(url)) return realFetch(input, init);
  const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
  if (!headers.has('authorization')) headers.set('authorization', auth);
  return realFetch(input, { ...init, headers });
};

const targetURL = new URL(target);
const realHTTPRequest = http.request;
http.request = function requestOverTLS(opts, ...rest) {
  if (targetURL.protocol !== 'https:' || !opts || typeof opts !== 'object' || opts instanceof URL ||
    opts.hostname !== targetURL.hostname || String(opts.port) !== targetURL.port) {
    return realHTTPRequest.call(this, opts, ...rest);
  }
  const headers = { ...(opts.headers ?? {}) };
  if (!Object.keys(headers).some((k) => k.toLowerCase() === 'authorization')) headers.authorization = auth;
  return https.request({ ...opts, headers }, ...rest);
};

// The suite's own copy of undici is CommonJS: changing its exports before
// the suite is imported changes what the suite's `import { request }` gets.
// The suite is the script node runs (process.argv[1]): 0.1.16 from
// ../node_modules, or the newest from conformance-next/node_modules.
const suite = createRequire(process.argv[1]);
const undici = suite('undici');
const realRequest = undici.request;
const urlHost = new URL(target).hostname.replace(/^\[|\]$/g, '');
const dispatcher = new undici.Agent({
  connect: { checkServerIdentity: (_servername, cert) => tls.checkServerIdentity(urlHost, cert) },
});
undici.request = function requestWithToken(url, opts = {}) {
  if (!toServer(url)) return realRequest.call(this, url, opts);
  const headers = { ...(opts.headers ?? {}) };
  if (!Object.keys(headers).some((k) => k.toLowerCase() === 'authorization')) headers.authorization = auth;
  return realRequest.call(this, url, { dispatcher, ...opts, headers });
};
