// opencode helpers shared by opencode.test.mjs and the tests run after
// `pdmcp dev` restarts (after-restart/): its config and environment, and
// the OAuth entry and kept home for bob's sign-in.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

import { cleanEnv, devInfo, keepDir } from './lib.mjs';

/** Where bob's opencode sign-in is kept across the restart. */
export function oauthHome() {
  return path.join(keepDir(), 'opencode-oauth');
}

/** The server entry for opencode's own OAuth flow with mcp-host. */
export function oauthEntry() {
  const info = devInfo();
  return { type: 'remote', url: info.mcpUrl,
    oauth: { clientId: info.hostClientId, scope: 'openid', callbackPort: info.callbackPort } };
}

/** opencode's output without its terminal colours and cursor codes. */
export function plain(s) {
  return s.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, '');
}

/**
 * Writes home's opencode.json (entry as the server, the scripted model as
 * its only provider, no sharing, no update) and returns run() options for
 * opencode there; models.dev is not fetched.
 */
export function opencodeOptions({ home, entry, model }) {
  const info = devInfo();
  mkdirSync(path.join(home, '.config', 'opencode'), { recursive: true });
  writeFileSync(path.join(home, '.config', 'opencode', 'opencode.json'), JSON.stringify({
    mcp: { [info.serverName]: entry },
    provider: {
      scripted: {
        npm: '@ai-sdk/openai-compatible',
        name: 'Scripted model',
        options: { baseURL: `${model?.url ?? 'http://127.0.0.1:9'}/v1`, apiKey: 'scripted-model-not-a-key' },
        models: { scripted: { name: 'Scripted', tool_call: true } },
      },
    },
    model: 'scripted/scripted',
    autoupdate: false,
    share: 'disabled',
  }, null, 2), { mode: 0o600 });
  const env = cleanEnv({
    HOME: home,
    XDG_CONFIG_HOME: path.join(home, '.config'),
    XDG_DATA_HOME: path.join(home, '.local', 'share'),
    XDG_CACHE_HOME: path.join(home, '.cache'),
    XDG_STATE_HOME: path.join(home, '.local', 'state'),
    NODE_EXTRA_CA_CERTS: info.caFile,
    OPENCODE_DISABLE_MODELS_FETCH: 'true',
    OPENCODE_DISABLE_AUTOUPDATE: 'true',
  });
  mkdirSync(path.join(home, 'work'), { recursive: true });
  return { env, cwd: path.join(home, 'work'), timeoutMs: 150_000 };
}
