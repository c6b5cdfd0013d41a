// Validates one fleet Turn stream (AI SDK "UI message stream" v1) with the
// real AI SDK (`ai`, pinned in t/js/package.json) plus the fleet-rlm rules.
//
// usage:
//   node t/js/check-stream.mjs --file BODY.sse [--headers HEAD.txt]
//        [--expect stop|error|abort] [--json] [--slice BYTES]
//   node t/js/check-stream.mjs --url URL [--body JSON] [--header 'Name: v']...
//        [--expect stop|error|abort] [--save BODY.sse] [--save-headers HEAD.txt]
//        [--timeout SECONDS] [--json] [--slice BYTES]
//
//   --file     raw response body bytes (as from `curl -sN`)
//   --headers  raw response head (as from `curl -D`); the last HTTP/ block
//              counts (so a `100 Continue` head is skipped)
//   --url      POST --body (default {"text":"hi"}, content-type
//              application/json) with fetch, check status and headers
//   --slice N  feed the body to the SDK parser in N-byte pieces (default:
//              in one piece); the result must not depend on it
//
// Exit 0: valid, one JSON summary line on stdout.
// Exit 1: violations, one per line on stderr ("check-stream: chunk #I
//         (type) [rule] message"); with --json also the JSON summary with
//         "ok":false and "violations" on stdout.
// Exit 2: usage error or unreadable input.
//
// Chunk indices count the `data:` events that are not [DONE], from 0; the
// [DONE] marker is reported as chunk #N where N is the number of chunks
// before it.  Rule names are stable (tests match on them):
//   header.*   response head       framing.*  raw SSE bytes
//   done.*     [DONE] marker       sdk.*      AI SDK parse/schema/state
//   type.*, keys.*, data.*        per-chunk shape (closed fleet-rlm set)
//   start.*, prelude.*, step.*, reasoning.*, text.*, tool.*, error.*,
//   finish.*, abort.*, terminal.*, usage.*, suffix.*   fleet-rlm §3.4 grammar
//   expect.terminal                --expect mismatch

import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import {
  parseJsonEventStream,
  readUIMessageStream,
  uiMessageChunkSchema,
  UIMessageStreamError,
} from 'ai';

// ---------------------------------------------------------------- CLI

const USAGE = `usage: check-stream.mjs (--file BODY.sse [--headers HEAD.txt] | --url URL [--body JSON] [--header 'K: V']... [--save BODY.sse] [--save-headers HEAD.txt] [--timeout S]) [--expect stop|error|abort] [--json] [--slice BYTES]`;

function usage(msg) {
  process.stderr.write(`check-stream: ${msg}\n${USAGE}\n`);
  process.exit(2);
}

let opts;
try {
  ({ values: opts } = parseArgs({
    options: {
      file: { type: 'string' },
      headers: { type: 'string' },
      url: { type: 'string' },
      body: { type: 'string' },
      header: { type: 'string', multiple: true },
      expect: { type: 'string' },
      save: { type: 'string' },
      'save-headers': { type: 'string' },
      timeout: { type: 'string' },
      slice: { type: 'string' },
      json: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
    allowPositionals: false,
  }));
} catch (e) {
  usage(e.message);
}
if (opts.help) {
  process.stdout.write(`${USAGE}\n`);
  process.exit(0);
}
if (!!opts.file === !!opts.url) usage('exactly one of --file and --url is required');
if (opts.file && (opts.body || opts.header || opts.save || opts['save-headers'] || opts.timeout))
  usage('--body/--header/--save/--save-headers/--timeout need --url');
if (opts.url && opts.headers) usage('--headers needs --file');
if (opts.expect && !['stop', 'error', 'abort'].includes(opts.expect))
  usage(`--expect must be stop, error or abort, not ${JSON.stringify(opts.expect)}`);
const slice = opts.slice === undefined ? 0 : Number(opts.slice);
if (!Number.isInteger(slice) || slice < 0) usage('--slice must be a non-negative integer');
const timeoutS = opts.timeout === undefined ? 60 : Number(opts.timeout);
if (!(timeoutS > 0)) usage('--timeout must be a positive number');

// ---------------------------------------------------------------- violations

const violations = [];
function violate(index, type, rule, message) {
  violations.push({ chunk: index, type: type ?? null, rule, message });
}
function fmtViolation(v) {
  let where;
  if (v.chunk === 'head') where = 'response head';
  else if (v.chunk === null || v.chunk === undefined) where = 'stream';
  else where = `chunk #${v.chunk}${v.type ? ` (${v.type})` : ''}`;
  return `${where} [${v.rule}] ${v.message}`;
}

// ---------------------------------------------------------------- input

let body; // Uint8Array
let head = null; // { status: number|null, headers: Map<lowercase name, value> }

if (opts.file) {
  try {
    body = new Uint8Array(readFileSync(opts.file));
  } catch (e) {
    usage(`cannot read --file: ${e.message}`);
  }
  if (opts.headers) {
    let text;
    try {
      text = readFileSync(opts.headers, 'latin1');
    } catch (e) {
      usage(`cannot read --headers: ${e.message}`);
    }
    head = parseHead(text);
  }
} else {
  const headers = { 'content-type': 'application/json', accept: 'text/event-stream' };
  for (const h of opts.header ?? []) {
    const m = /^([^:\s]+):\s*(.*)$/.exec(h);
    if (!m) usage(`bad --header ${JSON.stringify(h)} (want 'Name: value')`);
    headers[m[1].toLowerCase()] = m[2];
  }
  let res;
  try {
    res = await fetch(opts.url, {
      method: 'POST',
      headers,
      body: opts.body ?? '{"text":"hi"}',
      signal: AbortSignal.timeout(timeoutS * 1000),
    });
    // Read by hand so a stream that never ends still leaves its bytes.
    const pieces = [];
    const reader = res.body.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        pieces.push(value);
      }
    } catch (e) {
      violate(null, null, 'http.timeout',
        `body not finished after ${timeoutS}s (${pieces.reduce((n, p) => n + p.length, 0)} bytes read): ${e.name}`);
    }
    body = new Uint8Array(Buffer.concat(pieces));
  } catch (e) {
    violate('head', null, 'http.request', `POST ${opts.url} failed: ${e.cause?.message ?? e.message}`);
    report({ ok: false, types: [], messageId: null, finishReason: null, text: '', reasoning: [], code: [],
      outputs: [], error: null, usage: null, chunks: 0 });
  }
  const map = new Map();
  for (const [k, v] of res.headers) map.set(k.toLowerCase(), v);
  head = { status: res.status, headers: map };
  if (opts['save-headers']) {
    const lines = [`HTTP/1.1 ${res.status} ${res.statusText}`];
    for (const [k, v] of map) lines.push(`${k}: ${v}`);
    writeFileSync(opts['save-headers'], `${lines.join('\r\n')}\r\n\r\n`);
  }
  if (opts.save) writeFileSync(opts.save, body);
}

function parseHead(text) {
  // `curl -D` may hold several heads (100 Continue, redirects): use the last.
  const blocks = text.split(/\r?\n\r?\n/).filter((b) => /^HTTP\//.test(b));
  const lines = (blocks.length ? blocks[blocks.length - 1] : text).split(/\r?\n/);
  let status = null;
  const headers = new Map();
  for (const line of lines) {
    const st = /^HTTP\/[\d.]+\s+(\d{3})/.exec(line);
    if (st) {
      status = Number(st[1]);
      continue;
    }
    const m = /^([^:\s]+):\s*(.*?)\s*$/.exec(line);
    if (m) headers.set(m[1].toLowerCase(), m[2]);
  }
  return { status, headers };
}

// ---------------------------------------------------------------- head checks

if (head) {
  if (head.status !== null && head.status !== 200)
    violate('head', null, 'http.status', `status ${head.status}, want 200`);
  const ct = head.headers.get('content-type');
  if (ct === undefined) violate('head', null, 'header.content-type', 'no content-type header');
  else if (!ct.toLowerCase().startsWith('text/event-stream'))
    violate('head', null, 'header.content-type', `content-type ${JSON.stringify(ct)}, want text/event-stream`);
  const ui = head.headers.get('x-vercel-ai-ui-message-stream');
  if (ui === undefined)
    violate('head', null, 'header.ui-message-stream', 'no x-vercel-ai-ui-message-stream header');
  else if (ui.trim() !== 'v1')
    violate('head', null, 'header.ui-message-stream', `x-vercel-ai-ui-message-stream ${JSON.stringify(ui)}, want v1`);
}

// A non-200 answer is not a stream: report the head and a bit of the body.
if (head && head.status !== null && head.status !== 200) {
  const snippet = new TextDecoder().decode(body.subarray(0, 200));
  violate('head', null, 'http.body', `body of the ${head.status} answer: ${JSON.stringify(snippet)}`);
  report({ ok: false, types: [], messageId: null, finishReason: null, text: '', reasoning: [], code: [],
    outputs: [], error: null, usage: null, chunks: 0 });
}

// ---------------------------------------------------------------- framing
//
// The exact JsonToSseTransformStream form: each event is one line
// `data: <json>` followed by a blank line; `: comment` lines are allowed
// (keep-alive); the body ends with exactly one `data: [DONE]\n\n`.

const framing = checkFraming(body);

function checkFraming(bytes) {
  let text;
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    violate(null, null, 'framing.utf8', 'body is not valid UTF-8');
    text = new TextDecoder('utf-8', { ignoreBOM: true }).decode(bytes);
  }
  if (text.startsWith('\uFEFF')) {
    violate(null, null, 'framing.bom', 'body starts with a byte order mark');
    text = text.slice(1);
  }
  if (text.includes('\r')) {
    violate(null, null, 'framing.cr', 'body contains CR characters; lines must end with LF only');
    text = text.replace(/\r\n?/g, '\n');
  }
  if (text.length === 0) violate(null, null, 'framing.empty', 'empty body');

  const dones = []; // number of data chunks before each [DONE]
  let nData = 0; // data events that are not [DONE], in SDK order
  let pos = 0;
  let blockNo = 0;
  let afterDoneReported = false;
  while (pos < text.length) {
    const end = text.indexOf('\n\n', pos);
    const where = () => (dones.length ? `after [DONE]` : `before chunk #${nData}`);
    if (end < 0) {
      const rest = text.slice(pos);
      violate(null, null, 'framing.unterminated',
        `body ends inside an event (no blank line after ${JSON.stringify(rest.length > 60 ? `${rest.slice(0, 60)}...` : rest)}); SSE parsers drop it`);
      if (dones.length && !afterDoneReported)
        violate(dones[0], '[DONE]', 'done.trailing', 'bytes after [DONE]');
      break;
    }
    const block = text.slice(pos, end);
    pos = end + 2;
    blockNo++;
    if (block === '' || block.startsWith('\n')) {
      violate(null, null, 'framing.blank-line', `extra blank line ${where()} (event ${blockNo})`);
      continue;
    }
    if (dones.length && !afterDoneReported) {
      violate(dones[0], '[DONE]', 'done.trailing', `event after [DONE]: ${JSON.stringify(block.slice(0, 60))}`);
      afterDoneReported = true;
    }
    let data = [];
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) continue; // comment / keep-alive
      const field = /^([^:]*)(:?)/.exec(line);
      if (field[1] === 'data') {
        if (!line.startsWith('data: ')) {
          violate(null, null, 'framing.data-prefix', `"${line.slice(0, 20)}..." ${where()}: want "data: " (with one space)`);
          data.push(line.slice(5));
        } else data.push(line.slice(6));
      } else if (['event', 'id', 'retry'].includes(field[1])) {
        violate(null, null, 'framing.field', `"${field[1]}:" line ${where()}; only "data: " lines are allowed`);
      } else {
        violate(null, null, 'framing.bad-line', `line ${JSON.stringify(line.slice(0, 60))} ${where()} is not "data: ..." or ": comment"`);
      }
    }
    if (data.length === 0) continue; // comment-only (keep-alive) block
    if (data.length > 1)
      violate(null, null, 'framing.multiline-data', `event with ${data.length} data lines ${where()}`);
    const payload = data.join('\n');
    if (payload === '') {
      violate(nData, null, 'framing.empty-data', 'empty "data:" payload');
      nData++;
    } else if (payload === '[DONE]') {
      if (dones.length) violate(nData, '[DONE]', 'done.duplicate', 'second [DONE]');
      dones.push(nData);
    } else {
      nData++;
    }
  }
  if (dones.length === 0) violate(null, null, 'done.missing', 'no "data: [DONE]" event terminated by a blank line');
  return { dones, nData };
}

// ---------------------------------------------------------------- SDK parse

function byteStream(bytes, n) {
  return new ReadableStream({
    start(c) {
      if (n <= 0) c.enqueue(bytes);
      else for (let i = 0; i < bytes.length; i += n) c.enqueue(bytes.subarray(i, i + n));
      c.close();
    },
  });
}

const parsed = [];
for await (const r of parseJsonEventStream({ stream: byteStream(body, slice), schema: uiMessageChunkSchema }))
  parsed.push(r);

if (parsed.length !== framing.nData)
  violate(null, null, 'sdk.event-count',
    `the SDK parser saw ${parsed.length} chunks, the framing check ${framing.nData}`);

const chunks = parsed.map((r, i) => {
  const raw = r.success ? r.rawValue ?? r.value : r.rawValue;
  const type = raw && typeof raw === 'object' && typeof raw.type === 'string' ? raw.type : null;
  if (!r.success) {
    const isJson = r.error?.name === 'AI_JSONParseError';
    const detail = isJson
      ? (r.error?.cause?.message ?? r.error?.message ?? String(r.error))
      : zodDetail(r.error?.cause, type) ?? String(r.error?.message ?? r.error).replace(/\s+/g, ' ').slice(0, 300);
    violate(i, type, isJson ? 'sdk.json' : 'sdk.schema',
      `${isJson ? 'not JSON' : 'rejected by uiMessageChunkSchema'}: ${detail}`);
  }
  return { i, ok: r.success, raw, type, value: r.success ? r.value : null };
});

// A union failure lists every branch; show the branch of the chunk's own
// type (its "type" matched) or, if none matched, say so.
function zodDetail(err, type) {
  const issues = err?.issues;
  if (!Array.isArray(issues)) return null;
  const fmt = (list) => list.map((i) => `${i.path?.length ? i.path.join('.') : '(chunk)'}: ${i.message}`).join('; ');
  if (issues.length === 1 && issues[0].code === 'invalid_union' && Array.isArray(issues[0].errors)) {
    const own = issues[0].errors.filter((branch) => !branch.some((i) => i.path?.length === 1 && i.path[0] === 'type'));
    if (own.length) return fmt(own[0]);
    return `no chunk schema has type ${JSON.stringify(type)}`;
  }
  return fmt(issues);
}

// ---------------------------------------------------------------- shape
//
// Closed chunk set of fleet-rlm §3.2 with a per-type key allow-list
// (clients.md §1.2; fleet-rlm forbids extra fields and omits nulls), and
// the data payloads of fleet-rlm §3.3 / the TUI's generated validator.

const PM = ['providerMetadata'];
const TOOL = ['toolCallId', 'providerExecuted', 'providerMetadata', 'toolMetadata', 'dynamic'];
const KEYS = {
  start: ['messageId', 'messageMetadata'],
  'start-step': [],
  'finish-step': [],
  'reasoning-start': ['id', ...PM],
  'reasoning-delta': ['id', 'delta', ...PM],
  'reasoning-end': ['id', ...PM],
  'text-start': ['id', ...PM],
  'text-delta': ['id', 'delta', ...PM],
  'text-end': ['id', ...PM],
  'tool-input-available': [...TOOL, 'toolName', 'input', 'title'],
  'tool-output-available': [...TOOL, 'output', 'preliminary'],
  'tool-output-error': [...TOOL, 'errorText'],
  error: ['errorText'],
  finish: ['finishReason', 'messageMetadata'],
  abort: ['reason'],
};
const DATA_TYPES = [
  'data-status', 'data-child-progress', 'data-skill', 'data-rlm-code', 'data-rlm-output',
  'data-attachment', 'data-warning', 'data-artifact', 'data-usage', 'data-structured-result',
];
for (const t of DATA_TYPES) KEYS[t] = ['id', 'data', 'transient'];

const META_KEYS = {
  start: ['schemaVersion', 'runId', 'sessionId', 'createdAt', 'delivery', 'traceId'],
  finish: ['schemaVersion', 'runId', 'sessionId', 'checkpointVersion', 'durationMs', 'idempotentReplay', 'traceId'],
};

const isStr = (v) => typeof v === 'string';
const isNStr = (v) => v === null || isStr(v);
const isNInt = (v) => v === null || Number.isInteger(v);
const isNBool = (v) => v === null || typeof v === 'boolean';
const isRec = (v) => typeof v === 'object' && v !== null && !Array.isArray(v);
const isNStrArr = (v) => v === null || (Array.isArray(v) && v.every(isStr));
const oneOf = (...vals) => (v) => vals.includes(v);
const CHILD_STATES = ['not_started', 'running', 'completed', 'failed', 'cancelled', 'timed_out'];
const CLEANUP_STATES = ['pending', 'complete', 'failed', 'not_required'];

// [required key alternatives (any one group fully present)], {key: check}
const DATA_SPEC = {
  'data-status': [[['phase']], { phase: isStr, status: isNStr, detail: isNStr, message: isNStr }],
  'data-skill': [[['skill_id', 'name', 'version'], ['skillId', 'name', 'version']],
    { skill_id: isStr, skillId: isNStr, name: isStr, version: isStr, phase: isNStr, trust: isNStr, affordances: isNStrArr }],
  'data-rlm-code': [[['code']], { code: isStr, step: isNInt, stream_id: isNStr, is_delta: isNBool, is_final: isNBool }],
  'data-rlm-output': [[['output']], { output: isStr, step: isNInt, stream_id: isNStr, is_delta: isNBool, is_final: isNBool }],
  'data-attachment': [[['attachment_id', 'filename'], ['attachmentId', 'filename']],
    { attachment_id: isStr, attachmentId: isNStr, filename: isStr, phase: isNStr, byte_size: isNInt, byteSize: isNInt }],
  'data-warning': [[['message']], { message: isStr, code: isNStr }],
  'data-artifact': [[['artifact_id'], ['artifactId']],
    { artifact_id: isStr, artifactId: isNStr, artifact_kind: isNStr, title: isNStr, media_type: isNStr,
      byte_size: isNInt, checksum_sha256: isNStr }],
  'data-usage': [[['usage']], { usage: isRec }],
  'data-structured-result': [[['schema_id', 'schema_version', 'value'], ['schemaId', 'schemaVersion', 'value']],
    { schema_id: isStr, schema_version: isStr, schemaId: isNStr, schemaVersion: isNStr }],
  'data-child-progress': [[['child_id', 'task_label', 'state']],
    { child_id: isStr, task_label: isStr, state: oneOf(...CHILD_STATES), elapsed_ms: isNInt,
      outcome: isNStr, cleanup_state: oneOf(...CLEANUP_STATES, null), parent_run_id: isNStr,
      evidence: isNStrArr, gaps: isNStrArr, result_file_count: isNInt, code_excerpt: isNStr, output_excerpt: isNStr }],
};

for (const c of chunks) {
  const { i, raw, type } = c;
  if (!isRec(raw)) {
    if (c.ok) violate(i, null, 'type.not-object', 'chunk is not a JSON object');
    continue;
  }
  if (type === null) {
    violate(i, null, 'type.missing', 'chunk has no string "type"');
    continue;
  }
  if (!KEYS[type]) {
    violate(i, type, 'type.unknown', `type "${type}" is not in the fleet-rlm chunk set`);
    continue;
  }
  for (const [k, v] of Object.entries(raw)) {
    if (k === 'type') continue;
    if (!KEYS[type].includes(k)) violate(i, type, 'keys.unknown', `unexpected key "${k}" (allowed: ${KEYS[type].join(', ') || 'none'})`);
    else if (v === null) violate(i, type, 'keys.null', `key "${k}" is null (fleet-rlm omits nulls)`);
  }
  if (META_KEYS[type] && isRec(raw.messageMetadata)) {
    for (const k of Object.keys(raw.messageMetadata))
      if (!META_KEYS[type].includes(k))
        violate(i, type, 'keys.metadata', `unexpected messageMetadata key "${k}" (allowed: ${META_KEYS[type].join(', ')})`);
  }
  if (type.startsWith('data-')) {
    if (!isRec(raw.data)) {
      violate(i, type, 'data.payload', '"data" must be an object');
      continue;
    }
    const [groups, checks] = DATA_SPEC[type];
    if (!groups.some((g) => g.every((k) => k in raw.data)))
      violate(i, type, 'data.payload', `data lacks ${groups.map((g) => g.join('+')).join(' or ')}`);
    for (const [k, check] of Object.entries(checks))
      if (k in raw.data && !check(raw.data[k]))
        violate(i, type, 'data.payload', `data.${k} has a bad value ${JSON.stringify(raw.data[k])?.slice(0, 80)}`);
    if (type === 'data-status' && raw.transient !== true)
      violate(i, type, 'data.transient', 'data-status must be transient:true');
  }
  if (type === 'start' && !(isStr(raw.messageId) && raw.messageId !== ''))
    violate(i, type, 'start.message-id', 'start must carry the run id as a non-empty messageId');
  if (type === 'abort' && !isStr(raw.reason)) violate(i, type, 'abort.reason', 'abort must carry a reason');
  if (type === 'error' && isStr(raw.errorText) && raw.errorText === '')
    violate(i, type, 'error.text', 'empty errorText');
}

// ---------------------------------------------------------------- grammar
//
// fleet-rlm §3.4 (pi-tui StreamLifecycle plus the committed-suffix rule).

const g = {
  started: false, startIdx: -1, sawError: false, errorIdx: -1,
  terminal: null, terminalIdx: -1, finishReason: null,
  stepDepth: 0, lastFinishStep: -1,
  usage: [], textStarts: [], artifacts: [],
  streams: {
    reasoning: { open: new Set(), ended: new Set() },
    text: { open: new Set(), ended: new Set() },
    tool: { open: new Set(), ended: new Set() },
  },
};
let afterTerminalReported = false;

function streamOp(kind, op, id, i, type) {
  const s = g.streams[kind];
  const label = kind === 'tool' ? 'tool call' : `${kind} stream`;
  if (!isStr(id)) return;
  if (op === 'start') {
    if (s.open.has(id)) violate(i, type, `${kind}.duplicate-start`, `${label} "${id}" is already open`);
    else if (s.ended.has(id)) violate(i, type, `${kind}.reopen`, `${label} "${id}" was already ended; ids never reopen`);
    else s.open.add(id);
    return;
  }
  const what = op === 'delta' ? 'delta' : 'end';
  if (s.ended.has(id)) {
    violate(i, type, `${kind}.${what}-after-end`, `${label} "${id}" was already ended`);
    return;
  }
  if (!s.open.has(id)) {
    violate(i, type, `${kind}.${what}-before-start`,
      kind === 'tool' ? `no tool-input-available for toolCallId "${id}"` : `no ${kind}-start for id "${id}"`);
    return;
  }
  if (op === 'end') {
    s.open.delete(id);
    s.ended.add(id);
  }
}

for (const c of chunks) {
  const { i, raw, type } = c;
  if (!isRec(raw) || type === null || !KEYS[type]) continue;

  if (g.terminal) {
    if (!afterTerminalReported)
      violate(i, type, 'terminal.trailing', `chunk after the terminal ${g.terminal} at chunk #${g.terminalIdx}; only [DONE] may follow`);
    afterTerminalReported = true;
    continue;
  }
  if (g.errorIdx >= 0 && !(type === 'finish' && raw.finishReason === 'error'))
    violate(i, type, 'error.next', `the error at chunk #${g.errorIdx} must be followed by finish{finishReason:"error"}`);

  if (!g.started) {
    // Prelude: transient preparation heartbeats, then start, or a startless
    // open failure (error + finish(error)) or cancellation (abort).
    if (type === 'data-status') {
      if (raw.transient !== true || raw.data?.phase !== 'preparation')
        violate(i, type, 'prelude.shape', 'before start only the transient data-status{phase:"preparation"} prelude is allowed');
      continue;
    }
    if (type === 'start' && g.sawError) violate(i, type, 'start.after-error', 'start after an error chunk');
    else if (!['start', 'error', 'abort', 'finish'].includes(type))
      violate(i, type, 'start.missing', 'chunk before start (only the prelude, start, error, finish(error) or abort may come first)');
    else if (type === 'finish' && raw.finishReason !== 'error')
      violate(i, type, 'start.missing', `finish{finishReason:${JSON.stringify(raw.finishReason)}} without start (a startless stream may only fail or abort)`);
  } else if (type === 'start') {
    violate(i, type, 'start.duplicate', `second start (first at chunk #${g.startIdx})`);
    continue;
  } else if (type === 'data-status' && raw.data?.phase === 'preparation') {
    violate(i, type, 'prelude.after-start', `preparation prelude after start (chunk #${g.startIdx})`);
  }

  switch (type) {
    case 'start':
      if (!g.started) {
        g.started = true;
        g.startIdx = i;
      }
      break;
    case 'start-step':
      if (g.stepDepth > 0) violate(i, type, 'step.nested', 'start-step while a step is open');
      g.stepDepth++;
      break;
    case 'finish-step':
      if (g.stepDepth === 0) violate(i, type, 'step.unbalanced', 'finish-step without an open start-step');
      else g.stepDepth--;
      g.lastFinishStep = i;
      // The SDK forgets open text/reasoning parts at finish-step.
      for (const kind of ['reasoning', 'text'])
        for (const id of g.streams[kind].open)
          violate(i, type, `${kind}.open-at-finish-step`, `${kind} stream "${id}" still open at finish-step (the SDK drops it)`);
      break;
    case 'reasoning-start': streamOp('reasoning', 'start', raw.id, i, type); break;
    case 'reasoning-delta': streamOp('reasoning', 'delta', raw.id, i, type); break;
    case 'reasoning-end': streamOp('reasoning', 'end', raw.id, i, type); break;
    case 'text-start': streamOp('text', 'start', raw.id, i, type); g.textStarts.push(i); break;
    case 'text-delta': streamOp('text', 'delta', raw.id, i, type); break;
    case 'text-end': streamOp('text', 'end', raw.id, i, type); break;
    case 'tool-input-available': streamOp('tool', 'start', raw.toolCallId, i, type); break;
    case 'tool-output-available':
    case 'tool-output-error': streamOp('tool', 'end', raw.toolCallId, i, type); break;
    case 'data-usage':
      if (g.usage.length) violate(i, type, 'usage.duplicate', `second data-usage (first at chunk #${g.usage[0]})`);
      g.usage.push(i);
      break;
    case 'data-artifact': g.artifacts.push(i); break;
    case 'error':
      if (g.sawError) violate(i, type, 'error.duplicate', `second error (first at chunk #${g.errorIdx})`);
      else g.errorIdx = i;
      g.sawError = true;
      break;
    case 'finish':
      if (raw.finishReason === 'error') {
        if (!g.sawError) violate(i, type, 'finish.error-without-error', 'finish{finishReason:"error"} without a preceding error chunk');
      } else if (raw.finishReason === 'stop') {
        if (g.sawError) violate(i, type, 'finish.stop-after-error', 'finish{finishReason:"stop"} after an error chunk');
      } else {
        violate(i, type, 'finish.reason', `finishReason ${JSON.stringify(raw.finishReason)}; fleet sends "stop" or "error"`);
      }
      g.terminal = 'finish';
      g.terminalIdx = i;
      g.finishReason = raw.finishReason ?? null;
      break;
    case 'abort':
      g.terminal = 'abort';
      g.terminalIdx = i;
      break;
    default:
      break;
  }
}

const nChunks = chunks.length;
if (!g.terminal) {
  violate(null, null, 'terminal.missing', `no terminal chunk (finish or abort) in ${nChunks} chunks`);
} else {
  for (const d of framing.dones)
    if (d <= g.terminalIdx) violate(d, '[DONE]', 'done.before-terminal', `[DONE] before the terminal ${g.terminal} at chunk #${g.terminalIdx}`);
}

const kind = !g.terminal ? 'none'
  : g.terminal === 'abort' ? 'abort'
  : g.finishReason === 'stop' ? 'stop'
  : g.finishReason === 'error' ? 'error' : `finish:${g.finishReason}`;

// After an error the stop itself is the fault (finish.stop-after-error);
// the success-only rules would just repeat it.
if (kind === 'stop' && !g.sawError) {
  const f = g.terminalIdx;
  if (g.stepDepth !== 0) violate(f, 'finish', 'step.unclosed', `${g.stepDepth} start-step without finish-step at finish(stop)`);
  for (const k of ['reasoning', 'text', 'tool'])
    for (const id of g.streams[k].open)
      violate(f, 'finish', `${k}.unclosed`, `${k === 'tool' ? 'tool call' : `${k} stream`} "${id}" still open at finish(stop)`);
  if (g.usage.length === 0) violate(f, 'finish', 'usage.missing', 'finish(stop) without a data-usage chunk');
  checkSuffix(f);
}

// Committed suffix (§3.4 item 3): after the last finish-step and
// contiguous up to finish(stop):
//   data-artifact* data-usage data-structured-result? text-start text-delta text-end finish
function checkSuffix(f) {
  const at = (j) => (j >= 0 && isRec(chunks[j]?.raw) ? chunks[j].raw : {});
  let j = f - 1;
  const want = (type, rule, what) => {
    if (at(j).type === type) return j--;
    violate(j >= 0 ? j : null, at(j).type ?? null, rule,
      `want ${type} ${what} (committed suffix: data-artifact* data-usage data-structured-result? text-start text-delta text-end finish)`);
    return -1;
  };
  const end = want('text-end', 'suffix.text-end', 'right before finish(stop)');
  if (end < 0) return;
  const delta = want('text-delta', 'suffix.text-delta', 'right before text-end (one delta with the whole answer)');
  if (delta < 0) return;
  const start = want('text-start', 'suffix.text-start', 'right before the text-delta');
  if (start < 0) return;
  if (!(at(start).id === at(delta).id && at(delta).id === at(end).id))
    violate(start, 'text-start', 'suffix.text-id', 'text-start/text-delta/text-end of the suffix have different ids');
  if (at(j).type === 'data-structured-result') j--;
  if (want('data-usage', 'suffix.usage', 'right before the final text (after an optional data-structured-result)') < 0) return;
  while (at(j).type === 'data-artifact') j--;
  const first = j + 1;
  if (first <= g.lastFinishStep)
    violate(first, at(first).type, 'suffix.before-finish-step', 'committed suffix starts before the last finish-step');
  for (const t of g.textStarts)
    if (t !== start) violate(t, 'text-start', 'suffix.text-elsewhere', 'text outside the committed suffix (the answer is sent once, after commit)');
  for (const a of g.artifacts)
    if (a < first) violate(a, 'data-artifact', 'suffix.artifact-elsewhere', 'data-artifact outside the committed suffix');
}

if (opts.expect && opts.expect !== kind)
  violate(null, null, 'expect.terminal', `terminal kind is ${kind}, --expect ${opts.expect}`);

// ---------------------------------------------------------------- SDK replay
//
// readUIMessageStream runs the SDK's processUIMessageStream state machine.
// An `error` chunk reaches onError as a plain Error (expected on error
// streams); UIMessageStreamError means the SDK rejected the sequence.

let pulled = 0;
const valid = chunks.filter((c) => c.ok);
const sdkErrors = [];
const source = new ReadableStream(
  {
    pull(ctl) {
      if (pulled < valid.length) ctl.enqueue(valid[pulled++].value);
      else ctl.close();
    },
  },
  { highWaterMark: 0 },
);
let message = null;
for await (const m of readUIMessageStream({
  stream: source,
  terminateOnError: false,
  onError: (e) => sdkErrors.push({ e, pulled }),
}))
  message = m;

const errorTexts = chunks.filter((c) => c.type === 'error' && c.ok).map((c) => c.raw.errorText);
for (const { e, pulled: p } of sdkErrors) {
  if (UIMessageStreamError.isInstance(e)) {
    // The failing chunk is the last one handed over (pipe reads one ahead at
    // most); confirm with the chunk type/id the error names.
    let idx = null;
    for (let k = p - 1; k >= Math.max(0, p - 4); k--) {
      const v = valid[k].value;
      const id = v.id ?? v.toolCallId;
      if ((v.type === e.chunkType || (e.chunkType === 'tool-invocation' && v.type.startsWith('tool-'))) && id === e.chunkId) {
        idx = valid[k].i;
        break;
      }
    }
    violate(idx, idx === null ? null : chunks[idx].type, 'sdk.state', e.message);
  } else if (errorTexts.includes(e.message)) {
    errorTexts.splice(errorTexts.indexOf(e.message), 1);
  } else {
    violate(null, null, 'sdk.error', `SDK reported ${e.name ?? 'Error'}: ${e.message}`);
  }
}

// ---------------------------------------------------------------- summary

function summarize(msg) {
  const parts = msg?.parts ?? [];
  const find = (t) => chunks.find((c) => c.type === t && isRec(c.raw));
  const startChunk = find('start');
  const errChunk = find('error');
  const usageChunk = find('data-usage');
  const summary = {
    ok: violations.length === 0,
    types: chunks.map((c) => c.type),
    messageId: isStr(startChunk?.raw.messageId) ? startChunk.raw.messageId : null,
    finishReason: g.terminal === 'abort' ? 'abort' : g.finishReason,
    text: parts.filter((p) => p.type === 'text').map((p) => p.text).join(''),
    reasoning: parts.filter((p) => p.type === 'reasoning').map((p) => p.text),
    code: parts.filter((p) => p.type === 'data-rlm-code').map((p) => p.data?.code),
    outputs: parts.filter((p) => p.type === 'data-rlm-output').map((p) => p.data?.output),
    error: errChunk && isStr(errChunk.raw.errorText) ? errChunk.raw.errorText : null,
    usage: usageChunk ? usageChunk.raw.data ?? null : null,
    chunks: chunks.length,
  };
  if (g.terminal === 'abort') {
    const ab = chunks[g.terminalIdx].raw;
    summary.abortReason = isStr(ab.reason) ? ab.reason : null;
  }
  return summary;
}

// stdout/stderr are synchronous for files and pipes on Linux, so exiting
// right after writing loses nothing.
function report(summary) {
  summary.ok = violations.length === 0;
  if (violations.length) {
    summary.violations = violations;
    for (const v of violations) process.stderr.write(`check-stream: ${fmtViolation(v)}\n`);
    if (opts.json) process.stdout.write(`${JSON.stringify(summary)}\n`);
    process.exit(1);
  }
  process.stdout.write(`${JSON.stringify(summary)}\n`);
  process.exit(0);
}

report(summarize(message));
