// A scripted model on 127.0.0.1 for the hosts' agent loops: it imitates
// the Anthropic Messages API (Claude Code), OpenAI Chat Completions and
// Responses (Copilot CLI, opencode, Codex) and the Gemini API (Gemini CLI), each
// streaming as the host asks. It does not think. Its script:
//
//  1. A user message names a call as `CALL <tool> <key>=<value>,...` (for
//     example `CALL read_protected_document documentId=proposal-aurora`;
//     callPrompt writes it; no quotes or braces, which some hosts escape).
//     When the request offers a tool whose name ends with <tool> (hosts
//     prefix MCP tools with the server's name), and no tool result has come
//     back yet, the model asks for that call.
//  2. When a request carries a result for that call, the model records the
//     result exactly as the host gave it (the text the model would read)
//     and answers "done".
//  3. Anything else (title generation, a request without that tool) is
//     answered with a short text.
//
// Every request is recorded: path, which dialect, the tool names offered,
// and the tool results seen. Tests read `calls` and `toolResults`.
import http from 'node:http';

export const CALL = /CALL (\S+) ((?:\w+=[\w.-]+)(?:,\w+=[\w.-]+)*)/;

/** The prompt that makes the scripted model call tool with args (strings). */
export function callPrompt(tool, args) {
  return `CALL ${tool} ${Object.entries(args).map(([k, v]) => `${k}=${v}`).join(',')}`;
}

function parseArgs(s) {
  return Object.fromEntries(s.split(',').map((kv) => kv.split('=')));
}

export async function startModel() {
  const requests = [];
  const toolResults = [];
  let seq = 0;

  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const raw = Buffer.concat(chunks).toString('utf8');
    let body = {};
    try {
      body = raw ? JSON.parse(raw) : {};
    } catch {
      body = {};
    }
    const url = new URL(req.url, 'http://model');
    const entry = { method: req.method, path: url.pathname, dialect: null, tools: [], results: [], asked: null };
    Object.defineProperty(entry, 'body', { value: body });
    requests.push(entry);
    try {
      if (req.method === 'POST' && /\/messages$/.test(url.pathname)) {
        entry.dialect = 'anthropic';
        return anthropic(body, entry, res);
      }
      if (req.method === 'POST' && /\/messages\/count_tokens$/.test(url.pathname)) {
        return json(res, 200, { input_tokens: 10 });
      }
      if (req.method === 'POST' && /\/chat\/completions$/.test(url.pathname)) {
        entry.dialect = 'openai-chat';
        return openaiChat(body, entry, res);
      }
      if (req.method === 'POST' && /\/responses$/.test(url.pathname)) {
        entry.dialect = 'openai-responses';
        return openaiResponses(body, entry, res);
      }
      const gm = /\/models\/([^/:]+):(streamGenerateContent|generateContent|countTokens)$/.exec(url.pathname);
      if (req.method === 'POST' && gm) {
        entry.dialect = 'gemini';
        if (gm[2] === 'countTokens') return json(res, 200, { totalTokens: 10 });
        return gemini(body, entry, res, gm[2] === 'streamGenerateContent');
      }
      if (req.method === 'GET' && /\/models$/.test(url.pathname)) {
        return json(res, 200, { object: 'list', data: [{ id: 'scripted', object: 'model', owned_by: 'pdmcp-test' }] });
      }
      json(res, 404, { error: { type: 'not_found', message: `the scripted model has no ${req.method} ${url.pathname}` } });
    } catch (e) {
      json(res, 500, { error: { type: 'scripted_model_error', message: String(e?.stack ?? e) } });
    }
  });

  // plan decides the reply from the script (see the top of the file).
  function plan(entry, userTexts, offered, resultsForCall) {
    entry.tools = offered;
    // The first user message that names a call (hosts may put their own
    // context in user messages before the prompt).
    const m = userTexts.map((t) => CALL.exec(t ?? '')).find(Boolean);
    if (!m) return { text: 'ok' };
    const [, suffix, argText] = m;
    const tool = offered.find((n) => n === suffix || n.endsWith(`__${suffix}`) || n.endsWith(`_${suffix}`) ||
      n.endsWith(`-${suffix}`) || n.endsWith(`.${suffix}`));
    if (resultsForCall.length) {
      entry.results = resultsForCall;
      for (const r of resultsForCall) toolResults.push({ dialect: entry.dialect, tool: r.name ?? tool, content: r.content });
      return { text: 'done' };
    }
    if (!tool) return { text: `no tool ending in ${suffix} was offered` };
    entry.asked = { tool, args: parseArgs(argText) };
    seq += 1;
    return { call: { id: `call_${seq}`, name: tool, args: parseArgs(argText) } };
  }

  // Anthropic Messages API.
  function anthropic(body, entry, res) {
    const messages = body.messages ?? [];
    const text = (c) => (typeof c === 'string' ? c : (c ?? []).filter((b) => b.type === 'text').map((b) => b.text).join('\n'));
    const users = messages.filter((m) => m.role === 'user').map((m) => text(m.content));
    const last = messages[messages.length - 1];
    const results = (last?.role === 'user' && Array.isArray(last.content) ? last.content : [])
      .filter((b) => b.type === 'tool_result')
      .map((b) => ({ id: b.tool_use_id, content: b.content, isError: b.is_error }));
    const p = plan(entry, users, (body.tools ?? []).map((t) => t.name).filter(Boolean), results);
    const id = `msg_${seq}_${requests.length}`;
    const usage = { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };
    const block = p.call
      ? { type: 'tool_use', id: `toolu_${p.call.id}`, name: p.call.name, input: p.call.args }
      : { type: 'text', text: p.text };
    const stop = p.call ? 'tool_use' : 'end_turn';
    const model = body.model ?? 'scripted';
    if (!body.stream) {
      return json(res, 200, { id, type: 'message', role: 'assistant', model, content: [block], stop_reason: stop,
        stop_sequence: null, usage });
    }
    const events = [
      ['message_start', { type: 'message_start', message: { id, type: 'message', role: 'assistant', model, content: [],
        stop_reason: null, stop_sequence: null, usage } }],
      ['content_block_start', { type: 'content_block_start', index: 0,
        content_block: p.call ? { ...block, input: {} } : { type: 'text', text: '' } }],
      ['content_block_delta', { type: 'content_block_delta', index: 0, delta: p.call
        ? { type: 'input_json_delta', partial_json: JSON.stringify(p.call.args) }
        : { type: 'text_delta', text: p.text } }],
      ['content_block_stop', { type: 'content_block_stop', index: 0 }],
      ['message_delta', { type: 'message_delta', delta: { stop_reason: stop, stop_sequence: null },
        usage: { output_tokens: 5 } }],
      ['message_stop', { type: 'message_stop' }],
    ];
    sse(res, events.map(([event, data]) => ({ event, data })));
  }

  // OpenAI Chat Completions.
  function openaiChat(body, entry, res) {
    const messages = body.messages ?? [];
    const users = messages.filter((m) => m.role === 'user').map((m) => openaiText(m.content));
    // The results after the last assistant message.
    const results = trailing(messages, (m) => m.role === 'tool')
      .map((m) => ({ id: m.tool_call_id, content: m.content }));
    const offered = (body.tools ?? []).map((t) => t.function?.name ?? t.name).filter(Boolean);
    const p = plan(entry, users, offered, results);
    const id = `chatcmpl_${requests.length}`;
    const created = Math.floor(Date.now() / 1000);
    const model = body.model ?? 'scripted';
    const toolCalls = p.call
      ? [{ index: 0, id: p.call.id, type: 'function', function: { name: p.call.name, arguments: JSON.stringify(p.call.args) } }]
      : undefined;
    const finish = p.call ? 'tool_calls' : 'stop';
    const usage = { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 };
    if (!body.stream) {
      return json(res, 200, { id, object: 'chat.completion', created, model, usage, choices: [{ index: 0,
        finish_reason: finish, message: { role: 'assistant', content: p.call ? null : p.text, tool_calls: toolCalls } }] });
    }
    const chunk = (delta, finishReason, extra = {}) => ({ data: { id, object: 'chat.completion.chunk', created, model,
      choices: [{ index: 0, delta, finish_reason: finishReason }], ...extra } });
    const events = [
      chunk({ role: 'assistant', content: p.call ? null : '' }, null),
      chunk(p.call ? { tool_calls: toolCalls } : { content: p.text }, null),
      chunk({}, finish, { usage }),
      { data: '[DONE]' },
    ];
    sse(res, events);
  }

  // OpenAI Responses API.
  function openaiResponses(body, entry, res) {
    const input = typeof body.input === 'string' ? [{ role: 'user', content: body.input }] : (body.input ?? []);
    const users = input.filter((m) => m.role === 'user').map((m) => openaiText(m.content));
    const results = trailing(input, (m) => m.type === 'function_call_output')
      .map((m) => ({ id: m.call_id, content: m.output }));
    // Codex offers each MCP server's tools as one namespace tool
    // ({type: "namespace", name: "mcp__<server>", tools: [...]}); a call of
    // one of them names the tool and its namespace. Offered here as
    // <namespace>__<tool>.
    const inNamespace = new Map();
    const offered = (body.tools ?? []).flatMap((t) => {
      if (t.type !== 'namespace') return [t.name ?? t.function?.name];
      return (t.tools ?? []).map((f) => {
        const full = `${t.name}__${f.name}`;
        inNamespace.set(full, { namespace: t.name, name: f.name });
        return full;
      });
    }).filter(Boolean);
    const p = plan(entry, users, offered, results);
    const id = `resp_${requests.length}`;
    const model = body.model ?? 'scripted';
    const item = p.call
      ? { type: 'function_call', id: `fc_${p.call.id}`, call_id: p.call.id, ...(inNamespace.get(p.call.name) ?? { name: p.call.name }),
        arguments: JSON.stringify(p.call.args), status: 'completed' }
      : { type: 'message', id: `msg_${requests.length}`, role: 'assistant', status: 'completed',
        content: [{ type: 'output_text', text: p.text, annotations: [] }] };
    const usage = { input_tokens: 10, output_tokens: 5, total_tokens: 15 };
    const response = { id, object: 'response', created_at: Math.floor(Date.now() / 1000), model, status: 'completed',
      output: [item], usage };
    if (!body.stream) return json(res, 200, response);
    const events = [
      { event: 'response.created', data: { type: 'response.created', response: { ...response, status: 'in_progress', output: [] } } },
      { event: 'response.output_item.added', data: { type: 'response.output_item.added', output_index: 0, item } },
      { event: 'response.output_item.done', data: { type: 'response.output_item.done', output_index: 0, item } },
      { event: 'response.completed', data: { type: 'response.completed', response } },
    ];
    sse(res, events);
  }

  // Gemini API (generateContent / streamGenerateContent?alt=sse).
  function gemini(body, entry, res, stream) {
    const contents = body.contents ?? [];
    const text = (c) => (c?.parts ?? []).map((p) => p.text ?? '').join('\n');
    const users = contents.filter((c) => c.role === 'user').map(text);
    const last = contents[contents.length - 1];
    const results = (last?.role === 'user' ? last.parts ?? [] : [])
      .filter((p) => p.functionResponse)
      .map((p) => ({ id: p.functionResponse.id, name: p.functionResponse.name, content: p.functionResponse.response }));
    const offered = (body.tools ?? []).flatMap((t) => t.functionDeclarations ?? []).map((f) => f.name).filter(Boolean);
    const p = plan(entry, users, offered, results);
    const part = p.call ? { functionCall: { name: p.call.name, args: p.call.args } } : { text: p.text };
    const out = { candidates: [{ content: { role: 'model', parts: [part] }, finishReason: 'STOP', index: 0 }],
      usageMetadata: { promptTokenCount: 10, candidatesTokenCount: 5, totalTokenCount: 15 }, modelVersion: 'scripted' };
    if (!stream) return json(res, 200, out);
    sse(res, [{ data: out }]);
  }

  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    toolResults,
    /** The calls the model asked for, in order. */
    get calls() {
      return requests.filter((r) => r.asked).map((r) => r.asked);
    },
    close: () => new Promise((resolve) => {
      server.closeAllConnections?.();
      server.close(resolve);
    }),
  };
}

// openaiText is the text of an OpenAI message's content: a string or a
// list of parts.
function openaiText(c) {
  return typeof c === 'string' ? c : (c ?? []).map((p) => p.text ?? '').join('\n');
}

// trailing is the run of items at the end of list that isResult accepts,
// in order: the tool results sent since the model's last turn.
function trailing(list, isResult) {
  let i = list.length;
  while (i > 0 && isResult(list[i - 1])) i -= 1;
  return list.slice(i);
}

function json(res, status, body) {
  const b = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(b) });
  res.end(b);
}

function sse(res, events) {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  for (const e of events) {
    if (e.event) res.write(`event: ${e.event}\n`);
    res.write(`data: ${typeof e.data === 'string' ? e.data : JSON.stringify(e.data)}\n\n`);
  }
  res.end();
}

/** Everything a host handed its model as one tool result, flattened to text. */
export function resultText(content) {
  if (content == null) return '';
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map(resultText).join('\n');
  if (typeof content === 'object') {
    if (typeof content.text === 'string' && Object.keys(content).length <= 3) return content.text;
    return JSON.stringify(content);
  }
  return String(content);
}
