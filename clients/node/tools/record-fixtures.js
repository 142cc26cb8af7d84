#!/usr/bin/env node
// Records clients/fixtures from a real warden: each exchange is played by
// this client through a recording proxy (a unix socket in front of
// warden's), in a warden booted afresh for it, then the values that vary
// from run to run (pids, durations, paths, keys, uptimes, idle times, the
// time a hold is asked for, when detached commands started) are set to
// stable ones and long lists in status are trimmed. Needs root.
//
//   node clients/node/tools/record-fixtures.js [NAME...]
//
// Exchanges warden cannot be made to produce with this client (a version
// warden does not speak) are written by hand from the Rust types, marked
// "synthetic" in their about.

import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { connect } from '../index.js';
import { bootWarden, livePrerequisites } from '../test-support/live-warden.js';
import { FIXTURES, FrameSplitter, fixtureFrame } from '../test-support/frames.js';
import { play } from '../test-support/calls.js';

const MACHINE = '/machine';
const RIGHT_KEY = '5f0c6a1e9b7d42c38e1f0a9b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d';
const WRONG_KEY = '0000000000000000000000000000000000000000000000000000000000000000';
/** A hold's time in the fixtures (2027-01-01T00:00:00Z); recorded as an hour from then. */
const HOLD_UNTIL = 1798761600000;
/** When the detached commands in the fixtures started (Unix ms), a second apart, in order of first appearance. */
const STARTED_MS = 1796112000000;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A proxy that records every frame each way, in the order each is whole. */
async function recordingProxy(target, dir) {
  const socketPath = path.join(dir, `proxy-${process.pid}-${Math.random().toString(16).slice(2)}.sock`);
  const frames = [];
  const connections = [];
  const server = net.createServer((down) => {
    const up = net.createConnection({ path: target });
    const done = new Promise((resolve) => {
      let open = 2;
      const one = () => {
        if (--open === 0) resolve();
      };
      up.on('close', one);
      down.on('close', one);
    });
    connections.push(done);
    const fromClient = new FrameSplitter();
    const fromWarden = new FrameSplitter();
    const drain = (splitter, from) => {
      for (const frame of splitter.frames.splice(0)) frames.push(fixtureFrame(from, frame));
    };
    down.on('data', (chunk) => {
      fromClient.push(chunk);
      drain(fromClient, 'client');
      up.write(chunk);
    });
    up.on('data', (chunk) => {
      fromWarden.push(chunk);
      drain(fromWarden, 'warden');
      down.write(chunk);
    });
    down.on('end', () => up.end());
    up.on('end', () => down.end());
    down.on('error', () => up.destroy());
    up.on('error', () => down.destroy());
  });
  await new Promise((resolve) => server.listen(socketPath, resolve));
  return {
    path: socketPath,
    frames,
    async close() {
      await Promise.race([Promise.all(connections), sleep(5000)]);
      await new Promise((resolve) => server.close(resolve));
      fs.rmSync(socketPath, { force: true });
    },
  };
}

/** Runs a command on a connection of its own (not recorded), left running. */
async function background(w, request) {
  const client = await connect({ socket: w.socket });
  const command = client.spawn(request);
  command.stdout.discard();
  command.stderr.discard();
  await command.started;
  return { client, command };
}

const SCENARIOS = [
  {
    name: 'hello_version_4',
    about: 'Version negotiation: the client offers [1,2,3,4]; warden answers with the highest both speak, 4, and its name.',
    call: { method: 'hello_only', args: {} },
  },
  {
    name: 'hello_unsupported_version',
    about:
      'No version in common (synthetic: a warden that speaks only version 5, its message formatted as src/api.rs does): unsupported_version on id 0, then warden closes the connection.',
    synthetic: {
      call: { method: 'hello_only', args: {} },
      frames: [
        { from: 'client', kind: 'control', id: 0, json: { type: 'hello', versions: [1, 2, 3, 4], client: 'warden-node 0.1.0' } },
        {
          from: 'warden',
          kind: 'control',
          id: 0,
          json: { type: 'error', code: 'unsupported_version', message: 'no common version: warden speaks [5], client [1, 2, 3, 4]' },
        },
      ],
      error: { code: 'unsupported_version', message_contains: 'no common version' },
    },
  },
  {
    name: 'run_stdout_stderr',
    about: 'A run in a folder with output on both streams and exit 0: started, stdout and stderr frames, then the exit report.',
    call: { method: 'run', args: { argv: ['sh', '-c', 'echo out; sleep 0.1; echo err >&2'], folder: 'p' } },
    duration: 4.2,
  },
  {
    name: 'run_env_shell',
    about: 'A shell line with env and a nested folder (made if missing): the clean environment plus the variable, the working folder under the workspace.',
    call: { method: 'run', args: { shell: 'echo "$GREETING from ${PWD#*/workspace/}"', folder: 'proj/sub', env: { GREETING: 'hello' } } },
    duration: 3.6,
  },
  {
    name: 'run_stdin_pipe',
    about:
      'stdin "pipe": the client sends the input in stdin frames on the command\'s id, then an empty stdin frame to close it; cat echoes it back.',
    call: { method: 'run', args: { argv: ['cat'], stdin: 'pipe' }, stdin_base64: Buffer.from('first line\nsecond line\n').toString('base64') },
    duration: 5.1,
  },
  {
    name: 'run_binary_round_trip',
    about: 'All 256 byte values through stdin and back on stdout: frames are binary-safe.',
    call: {
      method: 'run',
      args: { argv: ['cat'], stdin: 'pipe' },
      stdin_base64: Buffer.from(Array.from({ length: 256 }, (_, i) => i)).toString('base64'),
    },
    duration: 4.8,
  },
  {
    name: 'run_missing_program',
    about: 'A program that is not there: no started event, an exit report with status and code 127 and the error.',
    call: { method: 'run', args: { argv: ['no-such-program'] } },
    duration: 0.9,
  },
  {
    name: 'run_timeout',
    about: 'timeout_ms ends the command: warden kills its process group; the exit says limit "timeout", signal SIGKILL, status 137.',
    call: { method: 'run', args: { argv: ['sleep', '5'], timeout_ms: 300 } },
    duration: 301.7,
  },
  {
    name: 'run_unknown_field',
    about: 'A run request with a field warden does not know: bad_request on the run\'s id, and nothing runs (unknown fields are refused, so a typo never runs a different command).',
    call: { method: 'run', args: { argv: ['true'], surprise: 1 } },
    contains: 'unknown field `surprise`',
  },
  {
    name: 'run_bad_folder',
    about: 'A folder with ".." is refused before anything runs: bad_request on the run\'s id.',
    call: { method: 'run', args: { argv: ['true'], folder: '../x' } },
    contains: 'may not contain . or ..',
  },
  {
    name: 'signal_running',
    about:
      'A signal to a running command (after its started event): the signal request goes on id 0 with target = the run\'s id; warden answers signalled, and the exit reports SIGTERM, status 143.',
    call: { method: 'signal_after_start', args: { run: { argv: ['sleep', '30'] }, signal: 'TERM' } },
    duration: 12.3,
  },
  {
    name: 'status',
    about:
      'status with one command running (started on another connection) and one process of shell: the answer is a status event; lists are trimmed here (layout, layers, proxy hosts) but every required field is present.',
    call: { method: 'status', args: {} },
    async setup(w) {
      return background(w, { argv: ['sleep', '30'], folder: 'bg' });
    },
    async teardown(state) {
      await state.client.close();
    },
    trimStatus: true,
  },
  {
    name: 'audit',
    about: 'A runtime event appended to the audit log: warden answers recorded with the line\'s sequence number.',
    call: { method: 'audit', args: { kind: 'served_memory', fields: { file: 'notes.md', to: 'agent' } } },
  },
  {
    name: 'reload_bad_request',
    about: 'reload with a network.json that does not parse: bad_request naming the problem; the last good network policy holds.',
    call: { method: 'reload', args: {} },
    contains: 'the last good network policy holds',
    async setup(w) {
      fs.writeFileSync(path.join(w.dir, 'policy/network.json'), '{"hosts": 5}\n');
    },
  },
  {
    name: 'stop_shell',
    about: 'stop_shell (version 3) with KILL, one process of shell running (a sleep started on another connection): shell_stopped with the count signalled and left.',
    call: { method: 'stop_shell', args: { signal: 'KILL' } },
    async setup(w) {
      return background(w, { argv: ['sleep', '30'] });
    },
    async teardown(state) {
      await state.command.exit.catch(() => {});
      await state.client.close();
    },
  },
  {
    name: 'hold',
    about:
      'hold (version 4): keep the machine awake until a time (Unix ms; recorded an hour ahead, set here to 2027-01-01T00:00:00Z); warden answers held with the hold now in force.',
    call: { method: 'hold', args: { until_ms: HOLD_UNTIL } },
    // Asked for this far ahead of the recording (warden takes at most a week).
    holdAheadMs: 3600 * 1000,
  },
  {
    name: 'list',
    about:
      'list (version 4) with two detached commands started on another connection: one ended (exit 3; its exit report, no output), one running (tagged, in a folder); nobody attached.',
    call: { method: 'list', args: {} },
    async setup(w) {
      const client = await connect({ socket: w.socket });
      const done = await client.detach({ shell: 'echo done; exit 3' });
      await client.wait(done.command);
      await client.detach({ argv: ['sleep', '30'], folder: 'bg', tag: 'nightly build' });
      return { client };
    },
    async teardown(state) {
      await state.client.close();
    },
    duration: 1.3,
  },
  {
    name: 'wait',
    about:
      'wait (version 4) for detached command 1 (started on another connection, still running when asked): warden answers on the wait\'s own id, with the command\'s exit report once it has ended (exit 3).',
    call: { method: 'wait', args: { command: 1 } },
    async setup(w) {
      const client = await connect({ socket: w.socket });
      const started = await client.detach({ shell: 'sleep 0.3; exit 3' });
      if (started.command !== 1) throw new Error(`wait: the detached command is ${started.command}, not 1`);
      return { client };
    },
    async teardown(state) {
      await state.client.close();
    },
    duration: 302.4,
  },
  {
    name: 'host_refused_wrong_key',
    about: 'The host socket with a wrong key in the hello: refused on id 0 (half a second later), then warden closes the connection.',
    call: { method: 'hello_only', args: {} },
    host: true,
    key: WRONG_KEY,
    contains: 'wrong key',
  },
  {
    name: 'host_key_accepted',
    about: 'The host socket with the machine\'s key in the hello: let in, the usual hello answer (the key is compared: this fixture includes it).',
    call: { method: 'hello_only', args: {} },
    host: true,
    key: 'right',
  },
];

/**
 * The exit report's fields the fixtures pin (docs/protocol.md); fields a
 * later warden adds are left out, as clients of this version leave them.
 */
const EXIT_FIELDS = ['type', 'status', 'code', 'signal', 'limit', 'error', 'duration_ms', 'stdout_bytes', 'stderr_bytes', 'drained'];

function pinnedExit(exit) {
  return Object.fromEntries(EXIT_FIELDS.filter((k) => k in exit).map((k) => [k, exit[k]]));
}

/** A warden frame with its exit reports (an exit event's, a listed command's) in the fields pinned. */
function pinExits(frame) {
  if (frame.from !== 'warden' || frame.kind !== 'control') return frame;
  const json = frame.json;
  if (json.type === 'exit') return { ...frame, json: pinnedExit(json) };
  if (json.type === 'commands' && Array.isArray(json.commands)) {
    return { ...frame, json: { ...json, commands: json.commands.map((c) => (c.exit ? { ...c, exit: pinnedExit(c.exit) } : c)) } };
  }
  return frame;
}

/** Replaces every occurrence of the machine's folder, pids, and the hold's time asked for, with stable values. */
function normalizer(w, { holdUntil = null } = {}) {
  const pids = new Map();
  let nextPid = 101;
  const pid = (value) => {
    if (!pids.has(value)) pids.set(value, nextPid++);
    return pids.get(value);
  };
  const starts = new Map();
  const started = (value) => {
    if (!starts.has(value)) starts.set(value, STARTED_MS + 1000 * starts.size);
    return starts.get(value);
  };
  const walk = (value, key) => {
    if (typeof value === 'string') {
      let text = value.split(w.dir).join(MACHINE);
      if (w.key) text = text.split(w.key).join(RIGHT_KEY);
      return text;
    }
    if (Array.isArray(value)) return value.map((v) => walk(v, key));
    if (value && typeof value === 'object') {
      const out = {};
      for (const [k, v] of Object.entries(value)) {
        if (k === 'pid' && typeof v === 'number') out[k] = pid(v);
        else if (k === 'started_ms' && typeof v === 'number') out[k] = started(v);
        else if (k === 'until_ms' && holdUntil !== null && v === holdUntil) out[k] = HOLD_UNTIL;
        else out[k] = walk(v, k);
      }
      return out;
    }
    return value;
  };
  return walk;
}

function trimStatus(status) {
  const keepLayers = new Set(['identity', 'landlock', 'seccomp', 'firewall']);
  const out = { ...status };
  out.uptime_ms = 5012;
  out.boot_ms = 35.2;
  out.layout = status.layout.slice(0, 2);
  out.layers = status.layers.filter((l) => keepLayers.has(l.layer));
  out.running = status.running.map((r) => ({ ...r, running_ms: 250 }));
  if (status.gate) out.gate = { ...status.gate, since_ms: 5010 };
  if (status.activity) out.activity = { ...status.activity, idle_ms: 3 };
  if (status.proxy) out.proxy = { ...status.proxy, hosts: ['github.com'] };
  return out;
}

/** The protocol-level result of a fixture, from its frames alone. */
function resultFromFrames(call, frames) {
  const warden = frames.filter((f) => f.from === 'warden');
  const runId = frames.find((f) => f.from === 'client' && f.kind === 'control' && f.json.type === 'run')?.id;
  const errorOf = (event) => ({ error: { code: event.code, message: event.message } });
  const exitOf = (id) => {
    const exit = warden.find((f) => f.id === id && f.kind === 'control' && f.json.type === 'exit');
    if (!exit) return null;
    const data = (kind) => Buffer.concat(warden.filter((f) => f.id === id && f.kind === kind).map((f) => Buffer.from(f.base64, 'base64')));
    return { ...exit.json, stdout_base64: data('stdout').toString('base64'), stderr_base64: data('stderr').toString('base64') };
  };
  const fatal = warden.find((f) => f.id === 0 && f.kind === 'control' && f.json.type === 'error');
  if (call.method === 'hello_only') {
    const hello = warden.find((f) => f.id === 0 && f.json?.type === 'hello');
    return hello ? { result: hello.json } : errorOf(fatal.json);
  }
  if (call.method === 'run') {
    const error = warden.find((f) => f.id === runId && f.kind === 'control' && f.json.type === 'error');
    if (error) return errorOf(error.json);
    return { result: exitOf(runId) };
  }
  if (call.method === 'signal_after_start') {
    const answer = warden.find((f) => f.id === 0 && f.kind === 'control' && f.json.type !== 'hello');
    if (answer.json.type === 'error') return errorOf(answer.json);
    return { result: { signalled: answer.json, exit: exitOf(runId) } };
  }
  if (call.method === 'wait') {
    // Answered on the wait's own id: the exit event, or an error.
    const waitId = frames.find((f) => f.from === 'client' && f.kind === 'control' && f.json.type === 'wait').id;
    const answer = warden.find((f) => f.id === waitId && f.kind === 'control');
    if (answer.json.type === 'error') return errorOf(answer.json);
    return { result: answer.json };
  }
  const answer = warden.filter((f) => f.id === 0 && f.kind === 'control').at(-1);
  if (answer.json.type === 'error') return errorOf(answer.json);
  return { result: answer.json };
}

/** started moves to just after its run request: a client that waits for it before sending stdin still replays. */
function canonicalOrder(frames) {
  const out = frames.filter((f) => !(f.from === 'warden' && f.json?.type === 'started'));
  for (const started of frames.filter((f) => f.from === 'warden' && f.json?.type === 'started')) {
    const at = out.findIndex((f) => f.from === 'client' && f.id === started.id && f.json?.type === 'run');
    out.splice(at + 1, 0, started);
  }
  return out;
}

/** A stable part of warden's message, for clients to check. */
function messageContains(scenario, message) {
  const part = scenario.contains ?? message;
  if (!message.includes(part)) throw new Error(`${scenario.name}: ${JSON.stringify(message)} lacks ${JSON.stringify(part)}`);
  return part;
}

async function record(scenario, scratch) {
  if (scenario.synthetic) return { name: scenario.name, about: scenario.about, ...scenario.synthetic };
  const w = await bootWarden({ host: Boolean(scenario.host), name: 'warden-fixture' });
  let state = null;
  let proxy = null;
  try {
    state = scenario.setup ? await scenario.setup(w) : null;
    proxy = await recordingProxy(scenario.host ? w.hostSocket : w.socket, scratch);
    const key = scenario.key === 'right' ? w.key : scenario.key;
    // A hold is asked for a time ahead of now; the fixture says HOLD_UNTIL.
    const holdUntil = scenario.holdAheadMs ? Date.now() + scenario.holdAheadMs : null;
    const call = holdUntil === null ? scenario.call : { ...scenario.call, args: { ...scenario.call.args, until_ms: holdUntil } };
    // play() takes the key from the fixture's first client frame, as replays do.
    const skeleton = { call, frames: key ? [{ from: 'client', json: { key } }] : [] };
    const played = await play(skeleton, proxy.path, { timeoutMs: 15000 });
    await played.client?.close();
    await proxy.close();
    // list() gives warden's entries as they are: their exits pinned as the frames'.
    const pinned = ['list', 'wait'].includes(call.method) && played.result ? pinExits({ from: 'warden', kind: 'control', json: played.result }).json : played.result;
    const live = played.error ? { error: played.error } : { result: pinned };
    const frames = proxy.frames.map(pinExits);
    const derived = resultFromFrames(call, frames);
    if (!isDeepStrictEqual(derived, live)) {
      throw new Error(`${scenario.name}: the client's outcome differs from the frames':\n${JSON.stringify(live)}\n${JSON.stringify(derived)}`);
    }
    if (scenario.teardown) await scenario.teardown(state);
    // Stable values.
    const normalize = normalizer(w, { holdUntil });
    let fixed = canonicalOrder(normalize(frames));
    fixed = fixed.map((f) => {
      if (f.from === 'client' && f.json?.type === 'hello') return { ...f, json: { ...f.json, client: 'warden-node 0.1.0' } };
      if (f.from !== 'warden' || f.kind !== 'control') return f;
      const json = { ...f.json };
      if (json.type === 'exit' && scenario.duration !== undefined) json.duration_ms = scenario.duration;
      if (json.type === 'commands' && scenario.duration !== undefined) {
        json.commands = json.commands.map((c) => (c.exit ? { ...c, exit: { ...c.exit, duration_ms: scenario.duration } } : c));
      }
      if (json.type === 'status' && scenario.trimStatus) return { ...f, json: trimStatus(json) };
      return { ...f, json };
    });
    const outcome = resultFromFrames(scenario.call, fixed);
    const fixture = { name: scenario.name, about: scenario.about, call: scenario.call, frames: fixed };
    if (outcome.error) fixture.error = { code: outcome.error.code, message_contains: messageContains(scenario, outcome.error.message) };
    else fixture.result = outcome.result;
    return fixture;
  } finally {
    if (proxy) await proxy.close().catch(() => {});
    const stopped = await w.stop();
    if (stopped.exit?.code !== 143) console.error(`# ${scenario.name}: warden ended with ${JSON.stringify(stopped.exit)}\n${stopped.log}`);
  }
}

/** JSON with one frame per line, the rest indented. */
function format(fixture) {
  const lines = ['{'];
  const keys = Object.keys(fixture);
  keys.forEach((key, i) => {
    const comma = i < keys.length - 1 ? ',' : '';
    if (key === 'frames') {
      lines.push('  "frames": [');
      fixture.frames.forEach((f, j) => lines.push(`    ${JSON.stringify(f)}${j < fixture.frames.length - 1 ? ',' : ''}`));
      lines.push(`  ]${comma}`);
    } else if (key === 'result' && JSON.stringify(fixture.result).length > 100) {
      lines.push(`  "result": ${JSON.stringify(fixture.result, null, 2).split('\n').join('\n  ')}${comma}`);
    } else {
      lines.push(`  ${JSON.stringify(key)}: ${JSON.stringify(fixture[key])}${comma}`);
    }
  });
  lines.push('}');
  return `${lines.join('\n')}\n`;
}

async function main() {
  const pre = livePrerequisites();
  if (!pre.run) {
    console.error(pre.skip ?? pre.fail);
    process.exit(1);
  }
  const only = new Set(process.argv.slice(2));
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'warden-record.'));
  fs.mkdirSync(FIXTURES, { recursive: true });
  try {
    for (const scenario of SCENARIOS) {
      if (only.size && !only.has(scenario.name)) continue;
      const fixture = await record(scenario, scratch);
      fs.writeFileSync(path.join(FIXTURES, `${scenario.name}.json`), format(fixture));
      console.log(`wrote ${scenario.name}.json (${fixture.frames.length} frames)`);
    }
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

await main();
