// Conformance of fleet-lmstub with the official openai client.
//
// usage: node t/js/openai-lmstub.mjs [path/to/fleet-lmstub]
//
// Starts its own stub on a free loopback port with the script below,
// drives it through the openai package and prints TAP; exits non-zero
// if any check fails.

import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';

const here = dirname(fileURLToPath(import.meta.url));
const bin = resolve(process.argv[2] ?? join(here, '..', '..', 'bin', 'fleet-lmstub'));

const STREAMED = 'Streamed by the stub: ünïcødé ✓, emoji 🚀, and some more words.';
const PLAIN = 'A plain, non-streamed answer.';
const CUT = 'This answer is cut short.';
const script = [
  { match: 'stream please', model: 'stub-model', content: STREAMED, chunk_chars: 5 },
  { match: 'helper please', content: STREAMED, chunk_chars: 7 },
  { match: 'plain please', content: PLAIN },
  { match: 'retry me', status: 429, retry_after: 0.05 },
  { match: 'retry me', content: 'answered after one retry' },
  { match: 'limit me', status: 429, retry_after: 0.05, content: 'Slow down (scripted).' },
  { match: 'cut me', content: CUT, chunk_chars: 4, cut_after_chars: 10 },
];

let n = 0;
let failed = 0;
function ok(cond, name, got) {
  n++;
  if (!cond) failed++;
  console.log(`${cond ? 'ok' : 'not ok'} ${n} - ${name}`);
  if (!cond && got !== undefined)
    console.log(`# got: ${JSON.stringify(got)}`);
}

function start(dir) {
  const scriptFile = join(dir, 'script.jsonl');
  const logFile = join(dir, 'requests.jsonl');
  writeFileSync(scriptFile, script.map((e) => JSON.stringify(e)).join('\n') + '\n');
  const child = spawn(bin, ['--listen', '127.0.0.1:0', '--script', scriptFile,
    '--log', logFile], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise((res) => child.on('exit', (code, sig) => res({ code, sig })));
  const listening = new Promise((res, rej) => {
    const timer = setTimeout(() => rej(new Error('no "listening" line in 10 s')), 10000);
    child.on('error', rej);
    exited.then((st) => rej(new Error(`stub exited early: ${JSON.stringify(st)}`)));
    createInterface({ input: child.stdout }).once('line', (line) => {
      clearTimeout(timer);
      const m = /^listening (127\.0\.0\.1:\d+)$/.exec(line);
      if (m) res(m[1]);
      else rej(new Error(`unexpected first line: ${line}`));
    });
  });
  return { child, exited, listening, logFile };
}

function user(text) {
  return [{ role: 'system', content: 'You are a stub.' }, { role: 'user', content: text }];
}

async function streaming(client) {
  const stream = await client.chat.completions.create({
    model: 'stub-model', messages: user('stream please'),
    stream: true, stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  const last = chunks.at(-1);
  const finish = chunks.filter((c) => c.choices[0]?.finish_reason);
  ok(text === STREAMED, 'stream: reassembled content equals the script', text);
  ok(chunks[0]?.choices[0]?.delta?.role === 'assistant', 'stream: role on the first chunk', chunks[0]);
  ok(chunks.every((c) => c.object === 'chat.completion.chunk' && c.id === chunks[0].id &&
    c.model === 'stub-model'), 'stream: object, id and model on every chunk');
  ok(finish.length === 1 && finish[0].choices[0].finish_reason === 'stop' &&
    finish[0] === chunks.at(-2), 'stream: one finish_reason "stop", just before the usage chunk',
    finish.map((c) => c.choices));
  ok(last?.choices.length === 0 && last.usage?.completion_tokens === Math.ceil([...STREAMED].length / 4) &&
    last.usage.total_tokens === last.usage.prompt_tokens + last.usage.completion_tokens,
  'stream: usage chunk with empty choices and consistent totals', last);
}

async function helper(client) {
  const runner = client.chat.completions.stream({
    model: 'any-model', messages: user('helper please'),
    stream_options: { include_usage: true },
  });
  const deltas = [];
  runner.on('content', (delta) => deltas.push(delta));
  const final = await runner.finalChatCompletion();
  ok(final.choices[0].message.content === STREAMED && final.choices[0].finish_reason === 'stop',
    'stream helper: finalChatCompletion accumulates content and finish_reason', final.choices[0]);
  ok(deltas.length === Math.ceil([...STREAMED].length / 7), 'stream helper: one content event per chunk_chars piece',
    deltas);
}

async function plain(client) {
  const { data, response } = await client.chat.completions.create({
    model: 'any-model', messages: user('plain please'),
  }).withResponse();
  ok(data.object === 'chat.completion' && data.choices[0].message.role === 'assistant' &&
    data.choices[0].message.content === PLAIN && data.choices[0].finish_reason === 'stop',
  'non-stream: chat.completion with the scripted message', data);
  ok(data.usage.total_tokens === data.usage.prompt_tokens + data.usage.completion_tokens &&
    data.usage.completion_tokens === Math.ceil(PLAIN.length / 4), 'non-stream: usage is consistent', data.usage);
  ok(/^req_/.test(response.headers.get('x-request-id') ?? ''), 'non-stream: x-request-id header');
}

async function retry(client, logFile) {
  const res = await client.chat.completions.create({
    model: 'any-model', messages: user('retry me'),
  }, { maxRetries: 1 });
  ok(res.choices[0].message.content === 'answered after one retry', 'retry: 429 then 200 with maxRetries 1',
    res.choices[0]);
  const seen = readFileSync(logFile, 'utf8').trim().split('\n').map((l) => JSON.parse(l))
    .filter((l) => l.body?.messages?.at(-1)?.content === 'retry me').map((l) => l.status);
  ok(JSON.stringify(seen) === '[429,200]', 'retry: the log shows the 429 and the retried request', seen);
}

async function ratelimit(client) {
  let err;
  try {
    await client.chat.completions.create({ model: 'm', messages: user('limit me') }, { maxRetries: 0 });
  } catch (e) {
    err = e;
  }
  ok(err instanceof OpenAI.RateLimitError && err.status === 429 && err.code === 'rate_limit_exceeded' &&
    /Slow down/.test(err.message), 'error: 429 is a RateLimitError with the scripted message',
  err && { name: err.name, status: err.status, code: err.code, message: err.message });
  ok(err?.headers?.get('retry-after-ms') === '50' && err?.headers?.get('retry-after') === '1',
    'error: retry-after-ms and Retry-After headers');
}

async function nomatch(client) {
  let err;
  try {
    await client.chat.completions.create({ model: 'm', messages: user('nothing fits this') }, { maxRetries: 0 });
  } catch (e) {
    err = e;
  }
  ok(err instanceof OpenAI.InternalServerError && /no script entry matched/.test(err.message) &&
    /nothing fits this/.test(err.message), 'error: no match is a 500 naming the message', err?.message);
}

async function cut(client) {
  const stream = await client.chat.completions.create({
    model: 'm', messages: user('cut me'), stream: true,
  }, { maxRetries: 0 });
  let text = '';
  let err;
  try {
    for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
  } catch (e) {
    err = e;
  }
  ok(err !== undefined && text === CUT.slice(0, 10), 'cut: the client sees an error after 10 characters',
    { text, err: String(err) });
}

async function models(client) {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  ok(JSON.stringify(ids) === '["stub-model"]', 'models: the models named in the script', ids);
}

const dir = mkdtempSync(join(tmpdir(), 'lmstub-js-'));
const stub = start(dir);
try {
  const addr = await stub.listening;
  const client = new OpenAI({ baseURL: `http://${addr}/v1`, apiKey: 'x', timeout: 20000 });
  for (const t of [streaming, helper, plain, retry, ratelimit, nomatch, cut, models]) {
    try {
      await t(client, stub.logFile);
    } catch (e) {
      ok(false, `${t.name}: unexpected exception`, String(e?.stack ?? e));
    }
  }
  stub.child.kill('SIGTERM');
  const st = await stub.exited;
  ok(st.code === 0, 'stub exits 0 on SIGTERM', st);
} catch (e) {
  ok(false, 'stub started', String(e));
  stub.child.kill('SIGKILL');
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.log(`1..${n}`);
process.exitCode = failed > 0 ? 1 : 0;
