// The client against fake wardens played frame by frame: partial reads,
// many commands on one connection, back-pressure both ways, large frames,
// errors and the connection's end.

import assert from 'node:assert/strict';
import { spawn as spawnProcess } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import {
  BadRequestError,
  ConnectionError,
  ERROR_CLASSES,
  RefusedError,
  ERROR_CODES,
  MAX_FRAME,
  UnknownIdError,
  PROTOCOL_VERSIONS,
  WardenError,
  closeShared,
  connect,
  encodeFrame,
  shellRun,
} from '../index.js';
import { play } from '../test-support/calls.js';
import { replayWarden, scriptedWarden } from '../test-support/fake-warden.js';
import { loadFixtures } from '../test-support/frames.js';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const exitEvent = (fields = {}) => ({
  type: 'exit',
  status: 0,
  code: 0,
  duration_ms: 1.5,
  stdout_bytes: 0,
  stderr_bytes: 0,
  drained: true,
  ...fields,
});

test('every protocol error code has its class, and each is a WardenError', () => {
  assert.equal(ERROR_CODES.length, 14);
  for (const code of ERROR_CODES) {
    const error = WardenError.from(code, 'why');
    assert.ok(error instanceof WardenError);
    assert.ok(error instanceof ERROR_CLASSES[code]);
    assert.equal(error.code, code);
    assert.equal(error.wardenMessage, 'why');
  }
  const later = WardenError.from('some_later_code', 'new');
  assert.equal(later.code, 'some_later_code');
  assert.equal(later.constructor, WardenError);
  assert.equal(WardenError.from('refused', '').fatal, true);
  assert.equal(WardenError.from('bad_request', '').fatal, false);
});

test('a frame is a 9-byte header and its payload; more than 1 MiB is refused', () => {
  const frame = encodeFrame(4, 0xdeadbeef, Buffer.from('abc'));
  assert.deepEqual([...frame], [4, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 3, 97, 98, 99]);
  assert.equal(encodeFrame(1, 0, Buffer.alloc(MAX_FRAME)).length, MAX_FRAME + 9);
  assert.throws(() => encodeFrame(2, 1, Buffer.alloc(MAX_FRAME + 1)), RangeError);
});

test('a missing socket is a ConnectionError with the system code', async () => {
  await assert.rejects(connect({ socket: '/nonexistent/warden.sock' }), (e) => e instanceof ConnectionError && e.code === 'ENOENT');
});

test('the default socket is $WARDEN_SOCKET', async () => {
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello(3);
  });
  const before = process.env.WARDEN_SOCKET;
  process.env.WARDEN_SOCKET = warden.path;
  try {
    const client = await connect();
    assert.equal(client.version, 3);
    assert.equal(client.server, 'warden fake');
    await client.close();
  } finally {
    if (before === undefined) delete process.env.WARDEN_SOCKET;
    else process.env.WARDEN_SOCKET = before;
    await warden.close();
  }
});

test('the hello offers [1,...,8], names the client, and carries the key only when given', async () => {
  const hellos = [];
  const warden = await scriptedWarden(async (peer) => {
    hellos.push((await peer.hello(2)).json);
  });
  try {
    const a = await connect({ socket: warden.path });
    const b = await connect({ socket: warden.path, key: 'k'.repeat(64) });
    assert.equal(a.version, 2);
    await a.close();
    await b.close();
    assert.deepEqual(hellos[0], { type: 'hello', versions: [1, 2, 3, 4, 5, 6, 7, 8, 9], client: 'warden-node 0.1.0' });
    assert.equal(hellos[1].key, 'k'.repeat(64));
  } finally {
    await warden.close();
  }
});

test('no hello answer in time is a ConnectionError "timeout"; a closed connection is "closed"', async () => {
  const silent = await scriptedWarden(async (peer) => {
    await peer.next();
  });
  const closing = await scriptedWarden(async (peer) => {
    await peer.next();
    peer.socket.end();
  });
  try {
    await assert.rejects(connect({ socket: silent.path, timeoutMs: 200 }), (e) => e instanceof ConnectionError && e.code === 'timeout');
    await assert.rejects(connect({ socket: closing.path }), (e) => e instanceof ConnectionError && e.code === 'closed');
  } finally {
    await silent.close();
    await closing.close();
  }
});

test('a version warden was not offered is refused by the client', async () => {
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello(PROTOCOL_VERSIONS.at(-1) + 1);
  });
  try {
    await assert.rejects(connect({ socket: warden.path }), (e) => e instanceof ConnectionError && e.code === 'protocol');
  } finally {
    await warden.close();
  }
});

test('many commands at once on one connection: distinct ids, output to each its own', async () => {
  const ids = [];
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello();
    const runs = [];
    for (let i = 0; i < 20; i++) {
      const frame = await peer.next();
      assert.equal(frame.json.type, 'run');
      runs.push(frame);
      ids.push(frame.id);
    }
    for (const run of runs) peer.send('control', run.id, { type: 'started', command: run.id + 100, pid: run.id + 1000 });
    // Interleaved output: every command a piece at a time.
    for (let round = 0; round < 3; round++) {
      for (const run of runs) {
        peer.send('stdout', run.id, Buffer.from(`${run.json.argv[1]}:${round};`));
        peer.send('stderr', run.id, Buffer.from(`e${round}`));
      }
    }
    for (const run of [...runs].reverse()) peer.send('control', run.id, exitEvent({ stdout_bytes: 1, stderr_bytes: 6 }));
    await peer.next();
  });
  try {
    const client = await connect({ socket: warden.path });
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => client.run({ argv: ['echo', `c${i}`] })));
    results.forEach((r, i) => {
      assert.equal(r.stdout.toString(), `c${i}:0;c${i}:1;c${i}:2;`);
      assert.equal(r.stderr.toString(), 'e0e1e2');
      assert.equal(r.status, 0);
    });
    assert.equal(new Set(ids).size, 20);
    assert.ok(ids.every((id) => id > 0));
    // Ids are never reused on a connection.
    const more = client.spawn({ argv: ['true'] });
    assert.ok(!ids.includes(more.id));
    await client.close();
    await more.exit.catch(() => {});
  } finally {
    await warden.close();
  }
});

test('requests on id 0 are answered in the order sent, errors included', async () => {
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello();
    const types = [];
    for (let i = 0; i < 4; i++) types.push((await peer.next()).json.type);
    assert.deepEqual(types, ['status', 'audit', 'reload', 'stop_shell']);
    peer.send('control', 0, { type: 'status', version: '0', protocol: 3 });
    peer.send('control', 0, { type: 'recorded', seq: 9 });
    peer.send('control', 0, { type: 'error', code: 'bad_request', message: 'reload: no' });
    peer.send('control', 0, { type: 'shell_stopped', signalled: 0, left: 0 });
    await peer.next();
  });
  try {
    const client = await connect({ socket: warden.path });
    const [status, audit, reload, stopped] = await Promise.allSettled([client.status(), client.audit('k', { a: 1 }), client.reload(), client.stopShell()]);
    assert.equal(status.value.type, 'status');
    assert.deepEqual(audit.value, { type: 'recorded', seq: 9 });
    assert.ok(reload.reason instanceof BadRequestError);
    assert.equal(reload.reason.code, 'bad_request');
    assert.deepEqual(stopped.value, { type: 'shell_stopped', signalled: 0, left: 0 });
    await client.close();
  } finally {
    await warden.close();
  }
});

test('hold and handKeys (version 4): requests on id 0, resolving to the hold in force and the names', async () => {
  const requests = [];
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello(4);
    for (let i = 0; i < 4; i++) requests.push((await peer.next()).json);
    peer.send('control', 0, { type: 'held', until_ms: 1798761600000 });
    peer.send('control', 0, { type: 'held', until_ms: 0 });
    peer.send('control', 0, { type: 'keys_handed', names: ['API_TOKEN', 'OTHER'] });
    peer.send('control', 0, { type: 'error', code: 'bad_request', message: 'hold: until_ms 9999999999999 is more than a week from now (1)' });
    await peer.next();
  });
  try {
    const client = await connect({ socket: warden.path });
    assert.equal(client.version, 4);
    const [held, released, names, far] = await Promise.allSettled([
      client.hold(1798761600000),
      client.hold(0),
      client.handKeys('API_TOKEN=abc\nOTHER=1\n'),
      client.hold(9999999999999),
    ]);
    assert.deepEqual(requests, [
      { type: 'hold', until_ms: 1798761600000 },
      { type: 'hold', until_ms: 0 },
      { type: 'hand_keys', text: 'API_TOKEN=abc\nOTHER=1\n' },
      { type: 'hold', until_ms: 9999999999999 },
    ]);
    assert.equal(held.value, 1798761600000);
    assert.equal(released.value, 0);
    assert.deepEqual(names.value, ['API_TOKEN', 'OTHER']);
    assert.ok(far.reason instanceof BadRequestError && /more than a week/.test(far.reason.message));
    await assert.rejects(client.hold(-1), TypeError);
    await assert.rejects(client.hold(1.5), TypeError);
    await assert.rejects(client.handKeys(undefined), TypeError);
    assert.equal(client.closed, false);
    await client.close();
  } finally {
    await warden.close();
  }
});

test('beginRun, endRun and card (version 8): requests on id 0, resolving to the budget, the ending and the card', async () => {
  const requests = [];
  const card = { run: 'job-41', began: '2026-12-04T10:00:00.000000Z', ended: null, how: 'open', budget_micro_usd: 500000, spent_micro_usd: 0, models: [], requests: [], commands: [], hosts: { reached: [], refused: [] } };
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello(8);
    for (let i = 0; i < 5; i++) requests.push((await peer.next()).json);
    peer.send('control', 0, { type: 'run_begun', run: 'job-41', budget_micro_usd: 500000 });
    peer.send('control', 0, { type: 'run_begun', run: 'job-42', budget_micro_usd: 1000000 });
    peer.send('control', 0, { type: 'card', card });
    peer.send('control', 0, { type: 'run_ended', run: 'job-41', spent_micro_usd: 123456, how: 'budget' });
    peer.send('control', 0, { type: 'error', code: 'bad_request', message: 'card: no run "nope" in the audit log' });
    await peer.next();
  });
  try {
    const client = await connect({ socket: warden.path });
    assert.equal(client.version, 8);
    const [begun, defaulted, got, ended, unknown] = await Promise.allSettled([
      client.beginRun('job-41', 0.5),
      client.beginRun('job-42'),
      client.card('job-41'),
      client.endRun('job-41'),
      client.card('nope'),
    ]);
    assert.deepEqual(requests, [
      { type: 'begin_run', run: 'job-41', budget_usd: 0.5 },
      { type: 'begin_run', run: 'job-42' },
      { type: 'card', run: 'job-41' },
      { type: 'end_run', run: 'job-41' },
      { type: 'card', run: 'nope' },
    ]);
    assert.equal(begun.value, 500000);
    assert.equal(defaulted.value, 1000000);
    assert.deepEqual(got.value, card);
    assert.deepEqual(ended.value, { type: 'run_ended', run: 'job-41', spent_micro_usd: 123456, how: 'budget' });
    assert.ok(unknown.reason instanceof BadRequestError && /no run/.test(unknown.reason.message));
    assert.throws(() => client.endRun(''), TypeError);
    assert.throws(() => client.endRun('x'.repeat(129)), TypeError);
    assert.throws(() => client.endRun('a\nb'), TypeError);
    assert.throws(() => client.endRun('é'.repeat(65)), TypeError);
    await assert.rejects(client.beginRun('x', Number.NaN), TypeError);
    await assert.rejects(client.beginRun('x', '1'), TypeError);
    await assert.rejects(client.card(7), TypeError);
    assert.equal(client.closed, false);
    await client.close();
  } finally {
    await warden.close();
  }
});

test('a refused hand_keys answers that request and leaves the connection open; a refusal of the hello ends it', async () => {
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello(4);
    const run = await peer.next();
    assert.equal(run.json.type, 'run');
    peer.send('control', run.id, { type: 'started', command: 1, pid: 10 });
    assert.equal((await peer.next()).json.type, 'hand_keys');
    peer.send('control', 0, {
      type: 'error',
      code: 'refused',
      message: "hand_keys comes through the host's door only (the runtime writes its own .env)",
    });
    assert.equal((await peer.next()).json.type, 'status');
    peer.send('control', 0, { type: 'status', version: '0', protocol: 4 });
    peer.send('stdout', run.id, Buffer.from('still\n'));
    peer.send('control', run.id, exitEvent({ stdout_bytes: 6 }));
    await peer.next();
  });
  try {
    const client = await connect({ socket: warden.path });
    const command = client.spawn({ argv: ['sleep', '1'] });
    const output = command.stdout.text();
    await command.started;
    await assert.rejects(
      client.handKeys('A=1\n'),
      (e) => e instanceof RefusedError && e.code === 'refused' && e.fatal === false && /host's door only/.test(e.wardenMessage),
    );
    assert.equal(client.closed, false);
    assert.equal((await client.status()).protocol, 4);
    assert.equal((await command.exit).status, 0);
    assert.equal(await output, 'still\n');
    await client.close();
  } finally {
    await warden.close();
  }
  const refusing = await scriptedWarden(async (peer) => {
    await peer.next();
    peer.send('control', 0, { type: 'error', code: 'refused', message: 'wrong key' });
    peer.socket.end();
  });
  try {
    await assert.rejects(connect({ socket: refusing.path, key: 'x'.repeat(64) }), (e) => e instanceof RefusedError && e.fatal === true);
  } finally {
    await refusing.close();
  }
});

test('a run refused by warden rejects with the typed error, started and exit alike', async () => {
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello();
    const run = await peer.next();
    peer.send('control', run.id, { type: 'error', code: 'bad_request', message: 'unknown field `timout`' });
    await peer.next();
  });
  try {
    const client = await connect({ socket: warden.path });
    // A typo reaches warden, which refuses it, rather than running without a timeout.
    const command = client.spawn({ argv: ['sleep', '9'], timout: 5 });
    await assert.rejects(command.started, BadRequestError);
    await assert.rejects(command.exit, (e) => e instanceof WardenError && e.code === 'bad_request' && e.id === command.id);
    await client.close();
  } finally {
    await warden.close();
  }
});

test('run maps its options to the protocol: timeout, keepBackground, env, limits, stdin', async () => {
  const seen = [];
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello();
    for (;;) {
      const frame = await peer.next();
      if (frame === null) return;
      seen.push(frame);
      if (frame.kind === 'stdin' && frame.payload.length === 0) peer.send('control', frame.id, exitEvent());
      if (frame.kind === 'control' && frame.json.stdin !== 'pipe') peer.send('control', frame.id, exitEvent());
    }
  });
  try {
    const client = await connect({ socket: warden.path });
    await client.run({ shell: 'make', folder: 'a/b', timeout: 1500, keepBackground: true, env: {}, limits: { output_bytes: 10 } });
    await client.run({ argv: ['cat'], stdin: 'some input' });
    await client.run({ argv: ['cat'], stdin: new Uint8Array([0, 255]) });
    await client.run({ argv: ['cat'], stdin: '' });
    await client.close();
    const summary = seen.map((f) => (f.kind === 'control' ? f.json : `${f.kind}:${f.id}:${f.payload.toString('hex')}`));
    assert.deepEqual(summary, [
      { type: 'run', shell: 'make', folder: 'a/b', limits: { output_bytes: 10 }, timeout_ms: 1500, keep_background: true },
      { type: 'run', argv: ['cat'], stdin: 'pipe' },
      `stdin:2:${Buffer.from('some input').toString('hex')}`,
      'stdin:2:',
      { type: 'run', argv: ['cat'], stdin: 'pipe' },
      'stdin:3:00ff',
      'stdin:3:',
      { type: 'run', argv: ['cat'], stdin: 'pipe' },
      'stdin:4:',
    ]);
  } finally {
    await warden.close();
  }
});

test('stdin is sent in frames of at most 1 MiB, and write() waits while the socket is full', async () => {
  let release;
  const released = new Promise((resolve) => {
    release = resolve;
  });
  const frames = [];
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello();
    const run = await peer.next();
    peer.send('control', run.id, { type: 'started', command: 1, pid: 2 });
    peer.socket.pause(); // warden reads nothing for a while
    await released;
    peer.socket.resume();
    let total = 0;
    for (;;) {
      const frame = await peer.next();
      frames.push(frame.payload.length);
      if (frame.payload.length === 0) break;
      total += frame.payload.length;
    }
    peer.send('control', run.id, exitEvent({ stdout_bytes: total }));
    await peer.next();
  });
  try {
    const client = await connect({ socket: warden.path });
    const command = client.spawn({ argv: ['cat'], stdin: 'pipe' });
    await command.started;
    const size = 24 * MAX_FRAME + 12345;
    let written = false;
    const writing = command.write(Buffer.alloc(size, 7)).then(() => {
      written = true;
    });
    await sleep(300);
    assert.equal(written, false, 'write() resolved while warden was reading nothing');
    release();
    await writing;
    await command.end();
    const report = await command.exit;
    assert.equal(report.stdoutBytes, size);
    assert.ok(frames.slice(0, -1).every((n) => n > 0 && n <= MAX_FRAME));
    assert.equal(frames.at(-1), 0);
    assert.equal(frames.length, 26);
    await assert.rejects(command.write('late'), /closed/);
    await client.close();
  } finally {
    await warden.close();
  }
});

test('streaming holds at most about the high-water mark unread: a slow reader slows warden', async () => {
  const total = 48 << 20;
  let blockedWrites = 0;
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello();
    const run = await peer.next();
    peer.send('control', run.id, { type: 'started', command: 1, pid: 2 });
    const piece = Buffer.alloc(MAX_FRAME, 1);
    for (let sent = 0; sent < total; sent += piece.length) {
      if (!peer.send('stdout', run.id, piece)) {
        blockedWrites++;
        await new Promise((resolve) => peer.socket.once('drain', resolve));
      }
    }
    peer.send('control', run.id, exitEvent({ stdout_bytes: total }));
    await peer.next();
  });
  try {
    const client = await connect({ socket: warden.path });
    const command = client.spawn({ argv: ['yes'] }, { highWaterMark: 2 << 20 });
    await command.started;
    await sleep(300); // nobody reads: the client must stop reading its socket
    const heldWhileIdle = command.stdout.bufferedBytes;
    let count = 0;
    let maxHeld = heldWhileIdle;
    let n = 0;
    for await (const chunk of command.stdout) {
      count += chunk.length;
      maxHeld = Math.max(maxHeld, command.stdout.bufferedBytes);
      if (++n % 64 === 0) await sleep(1);
    }
    const report = await command.exit;
    assert.equal(count, total);
    assert.equal(report.stdoutBytes, total);
    assert.ok(heldWhileIdle <= (2 << 20) + (1 << 20), `held ${heldWhileIdle} bytes unread`);
    assert.ok(maxHeld <= (2 << 20) + (1 << 20), `held up to ${maxHeld} bytes unread`);
    assert.ok(blockedWrites > 0, 'the fake warden never had to wait');
    await client.close();
  } finally {
    await warden.close();
  }
});

test('leaving a for-await loop early discards the rest of that stream', async () => {
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello();
    const run = await peer.next();
    peer.send('control', run.id, { type: 'started', command: 1, pid: 2 });
    for (let i = 0; i < 40; i++) peer.send('stdout', run.id, Buffer.alloc(256 * 1024, 2));
    peer.send('stderr', run.id, Buffer.from('done'));
    peer.send('control', run.id, exitEvent({ stdout_bytes: 40 * 256 * 1024, stderr_bytes: 4 }));
    await peer.next();
  });
  try {
    const client = await connect({ socket: warden.path });
    const command = client.spawn({ argv: ['yes'] }, { highWaterMark: 64 * 1024 });
    for await (const chunk of command.stdout) {
      assert.ok(chunk.length > 0);
      break;
    }
    assert.equal(await command.stderr.text(), 'done');
    assert.equal((await command.exit).status, 0);
    assert.equal(command.stdout.bufferedBytes, 0);
    await client.close();
  } finally {
    await warden.close();
  }
});

test('kill() sends a signal request for the command; unknown_id is an UnknownIdError', async () => {
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello();
    const run = await peer.next();
    peer.send('control', run.id, { type: 'started', command: 5, pid: 77 });
    const signal = await peer.next();
    assert.deepEqual(signal.json, { type: 'signal', target: run.id, signal: 'INT' });
    assert.equal(signal.id, 0);
    peer.send('control', 0, { type: 'signalled', target: run.id, signal: 'SIGINT' });
    peer.send('control', run.id, exitEvent({ status: 130, code: undefined, signal: 'SIGINT' }));
    await peer.next();
    peer.send('control', 0, { type: 'error', code: 'unknown_id', message: `no running command with id ${run.id}` });
    await peer.next();
  });
  try {
    const client = await connect({ socket: warden.path });
    const command = client.spawn({ argv: ['sleep', '100'] });
    assert.deepEqual(await command.started, { command: 5, pid: 77 });
    assert.deepEqual(await command.kill('INT'), { type: 'signalled', target: command.id, signal: 'SIGINT' });
    const report = await command.exit;
    assert.equal(report.status, 130);
    assert.equal(report.signal, 'SIGINT');
    assert.equal(report.code, null);
    await assert.rejects(command.kill(), UnknownIdError);
    await client.close();
  } finally {
    await warden.close();
  }
});

test('pty (version 4): sent as given, stdin open without "pipe", resize() on id 0 after the start', async () => {
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello(4);
    const run = await peer.next();
    assert.deepEqual(run.json, { type: 'run', argv: ['bash', '-i'], pty: { rows: 24, cols: 80 } });
    // resize() asked before the start waits for it: nothing comes until then.
    await sleep(100);
    assert.equal(peer.splitter.frames.length, 0);
    peer.send('control', run.id, { type: 'started', command: 9, pid: 90 });
    const resize = await peer.next();
    assert.equal(resize.id, 0);
    assert.deepEqual(resize.json, { type: 'resize', target: run.id, rows: 40, cols: 120 });
    peer.send('control', 0, { type: 'resized', target: run.id, rows: 40, cols: 120 });
    const typed = await peer.next();
    assert.equal(typed.kind, 'stdin');
    assert.equal(typed.id, run.id);
    assert.deepEqual([...typed.payload], [3]);
    peer.send('stdout', run.id, Buffer.from('^C\r\n$ '));
    const bad = await peer.next();
    assert.deepEqual(bad.json, { type: 'resize', target: run.id, rows: 0, cols: 80 });
    peer.send('control', 0, { type: 'error', code: 'bad_request', message: 'pty 0x80: rows and cols must be 1 to 1000' });
    peer.send('control', run.id, exitEvent({ stdout_bytes: 6 }));
    const late = await peer.next();
    assert.deepEqual(late.json, { type: 'resize', target: run.id, rows: 10, cols: 10 });
    peer.send('control', 0, { type: 'error', code: 'unknown_id', message: `id ${run.id} runs no command on a terminal` });
    await peer.next();
  });
  try {
    const client = await connect({ socket: warden.path });
    const command = client.spawn({ argv: ['bash', '-i'], pty: { rows: 24, cols: 80 } });
    assert.deepEqual(command.terminal, { rows: 24, cols: 80 });
    assert.equal(command.stdinOpen, true);
    const resized = command.resize(40, 120);
    assert.deepEqual(await resized, { type: 'resized', target: command.id, rows: 40, cols: 120 });
    assert.deepEqual(command.terminal, { rows: 40, cols: 120 });
    await command.write('\x03');
    const first = await command.stdout[Symbol.asyncIterator]().next();
    assert.equal(first.value.toString(), '^C\r\n$ ');
    await assert.rejects(command.resize(0, 80), (e) => e instanceof BadRequestError && !e.fatal);
    assert.deepEqual(command.terminal, { rows: 40, cols: 120 }, 'a refused size is not taken');
    await assert.rejects(command.resize(1.5, 80), TypeError);
    const report = await command.exit;
    assert.equal(report.status, 0);
    assert.equal(await command.stderr.text(), '');
    await assert.rejects(command.resize(10, 10), UnknownIdError);
    await client.close();
  } finally {
    await warden.close();
  }
});

test('without pty, write() needs stdin "pipe"; run() with pty types its stdin bytes', async () => {
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello(4);
    const plain = await peer.next();
    assert.deepEqual(plain.json, { type: 'run', argv: ['true'] });
    peer.send('control', plain.id, exitEvent());
    const run = await peer.next();
    assert.deepEqual(run.json, { type: 'run', argv: ['cat'], stdin: 'pipe', pty: { rows: 5, cols: 6 } });
    const typed = await peer.next();
    assert.equal(typed.payload.toString(), 'hi\r');
    const closed = await peer.next();
    assert.equal(closed.payload.length, 0);
    peer.send('control', run.id, { type: 'started', command: 1, pid: 2 });
    peer.send('stdout', run.id, Buffer.from('hi\r\nhi\r\n'));
    peer.send('control', run.id, exitEvent({ stdout_bytes: 8 }));
    await peer.next();
  });
  try {
    const client = await connect({ socket: warden.path });
    const plain = client.spawn({ argv: ['true'] });
    await assert.rejects(plain.write('x'), /stdin "pipe" or a pty/);
    assert.equal(plain.terminal, null);
    await plain.exit;
    const r = await client.run({ argv: ['cat'], stdin: 'hi\r', pty: { rows: 5, cols: 6 } });
    assert.equal(r.stdout.toString(), 'hi\r\nhi\r\n');
    await client.close();
  } finally {
    await warden.close();
  }
});

test('detached commands (version 4): detach, list, attach, wait and signalCommand send what the protocol says and make sense of the answers', async () => {
  const listed = [
    { command: 7, tag: 't', argv: ['sleep', '9'], pid: 70, started_ms: 1796112000000, state: 'running', attached: 0, dropped_bytes: 12 },
  ];
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello(4);
    const run = await peer.next();
    assert.deepEqual(run.json, { type: 'run', argv: ['sleep', '9'], stdin: 'pipe', detach: true, tag: 't' });
    peer.send('control', run.id, { type: 'detached', command: 7, pid: 70, tag: 't' });
    const viaRun = await peer.next();
    assert.deepEqual(viaRun.json, { type: 'run', shell: 'true', detach: true });
    assert.ok(viaRun.id > run.id, 'a new id for each run');
    peer.send('control', viaRun.id, { type: 'detached', command: 8, pid: 80 });
    const missing = await peer.next();
    assert.deepEqual(missing.json, { type: 'run', argv: ['nope'], detach: true, tag: 'm' });
    peer.send('control', missing.id, exitEvent({ status: 127, code: 127, error: 'cannot execute nope: No such file or directory' }));
    const list = await peer.next();
    assert.deepEqual([list.id, list.json], [0, { type: 'list' }]);
    peer.send('control', 0, { type: 'commands', commands: listed });
    const attach = await peer.next();
    assert.deepEqual(attach.json, { type: 'attach', command: 7 });
    assert.ok(attach.id > missing.id);
    peer.send('control', attach.id, { type: 'attached', command: 7, dropped_bytes: 12 });
    peer.send('stdout', attach.id, Buffer.from('backlog\n'));
    peer.send('stderr', attach.id, Buffer.from('err\n'));
    const typed = await peer.next();
    assert.deepEqual([typed.kind, typed.id, typed.payload.toString()], ['stdin', attach.id, 'in\n']);
    peer.send('stdout', attach.id, Buffer.from('in\n'));
    const closed = await peer.next();
    assert.deepEqual([closed.kind, closed.id, closed.payload.length], ['stdin', attach.id, 0]);
    const resize = await peer.next();
    assert.deepEqual([resize.id, resize.json], [0, { type: 'resize', target: attach.id, rows: 40, cols: 120 }]);
    peer.send('control', 0, { type: 'resized', target: attach.id, rows: 40, cols: 120 });
    const wait = await peer.next();
    assert.deepEqual(wait.json, { type: 'wait', command: 7 });
    const signal = await peer.next();
    assert.deepEqual([signal.id, signal.json], [0, { type: 'signal_command', command: 7, signal: 'TERM' }]);
    peer.send('control', 0, { type: 'command_signalled', command: 7, signal: 'SIGTERM' });
    const ended = exitEvent({ status: 143, code: undefined, signal: 'SIGTERM', stdout_bytes: 11, stderr_bytes: 4 });
    peer.send('control', attach.id, ended);
    peer.send('control', wait.id, ended);
    const unknown = await peer.next();
    assert.deepEqual(unknown.json, { type: 'attach', command: 99 });
    peer.send('control', unknown.id, { type: 'error', code: 'unknown_id', message: 'no detached command 99' });
    const late = await peer.next();
    assert.deepEqual(late.json, { type: 'wait', command: 99 });
    peer.send('control', late.id, { type: 'error', code: 'unknown_id', message: 'no detached command 99' });
    const again = await peer.next();
    assert.deepEqual(again.json, { type: 'signal_command', command: 7, signal: 'KILL' });
    peer.send('control', 0, { type: 'error', code: 'unknown_id', message: 'no running detached command 7' });
    await peer.next();
  });
  try {
    const client = await connect({ socket: warden.path });
    assert.deepEqual(await client.detach({ argv: ['sleep', '9'], stdin: 'pipe', tag: 't' }), { command: 7, pid: 70, tag: 't', exit: null });
    assert.deepEqual(await client.run({ shell: 'true', detach: true }), { command: 8, pid: 80, tag: null, exit: null });
    const missing = await client.detach({ argv: ['nope'], tag: 'm' });
    assert.equal(missing.command, null);
    assert.equal(missing.tag, 'm');
    assert.equal(missing.exit.status, 127);
    assert.match(missing.exit.error, /nope/);
    assert.deepEqual(await client.list(), listed);
    await assert.rejects(client.detach({ argv: ['cat'], stdin: 'bytes' }), TypeError);
    await assert.rejects(client.detach({ argv: ['cat'], tag: 5 }), TypeError);
    assert.throws(() => client.attach(-1), TypeError);
    assert.throws(() => client.spawn({ argv: ['true'], detach: true }), TypeError);
    const attachment = client.attach(7);
    assert.equal(attachment.command, 7);
    assert.equal(attachment.droppedBytes, null);
    assert.deepEqual(await attachment.attached, { command: 7, droppedBytes: 12 });
    const lines = attachment.stdout[Symbol.asyncIterator]();
    assert.equal((await lines.next()).value.toString(), 'backlog\n');
    await attachment.write('in\n');
    assert.equal((await lines.next()).value.toString(), 'in\n');
    await attachment.end();
    assert.deepEqual(await attachment.resize(40, 120), { type: 'resized', target: attachment.id, rows: 40, cols: 120 });
    assert.deepEqual(attachment.terminal, { rows: 40, cols: 120 });
    const waited = client.wait(7);
    assert.deepEqual(await attachment.kill(), { type: 'command_signalled', command: 7, signal: 'SIGTERM' });
    const report = await attachment.exit;
    assert.equal(report.status, 143);
    assert.equal(report.command, 7);
    assert.equal(report.pid, null);
    assert.equal((await lines.next()).done, true);
    assert.equal(await attachment.stderr.text(), 'err\n');
    const other = await waited;
    assert.equal(other.status, 143);
    assert.equal(other.signal, 'SIGTERM');
    assert.equal(other.stdout, null);
    const nobody = client.attach(99);
    await assert.rejects(nobody.attached, (e) => e instanceof UnknownIdError && e.id === nobody.id && !e.fatal);
    await assert.rejects(nobody.exit, UnknownIdError);
    await assert.rejects(client.wait(99), UnknownIdError);
    await assert.rejects(client.signalCommand(7, 'KILL'), UnknownIdError);
    assert.equal(client.running, 0);
    await client.close();
  } finally {
    await warden.close();
  }
});

test('an unknown_id about late stdin does not end the command', async () => {
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello();
    const run = await peer.next();
    peer.send('control', run.id, { type: 'error', code: 'unknown_id', message: `id ${run.id} has no open stdin` });
    peer.send('control', run.id, exitEvent({ status: 127, code: 127, error: 'cannot execute x: ENOENT' }));
    await peer.next();
  });
  try {
    const client = await connect({ socket: warden.path });
    const command = client.spawn({ argv: ['x'], stdin: 'pipe' });
    const report = await command.exit;
    assert.equal(report.status, 127);
    assert.equal(report.error, 'cannot execute x: ENOENT');
    assert.equal(await command.started, null);
    assert.equal(command.stdinErrors.length, 1);
    await client.close();
  } finally {
    await warden.close();
  }
});

test('a fatal error or a lost connection fails everything pending, and later calls', async () => {
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello();
    await peer.next();
    await peer.next();
    peer.send('control', 0, { type: 'error', code: 'bad_frame', message: 'a frame took too long to arrive' });
    peer.socket.end();
  });
  try {
    const client = await connect({ socket: warden.path });
    const command = client.spawn({ argv: ['sleep', '9'] });
    const status = client.status();
    await assert.rejects(command.exit, (e) => e instanceof WardenError && e.code === 'bad_frame');
    await assert.rejects(status, (e) => e.code === 'bad_frame');
    await assert.rejects(client.status(), (e) => e.code === 'bad_frame');
    assert.equal(client.closed, true);
  } finally {
    await warden.close();
  }
  const dropping = await scriptedWarden(async (peer) => {
    await peer.hello();
    await peer.next();
    peer.socket.destroy();
  });
  try {
    const client = await connect({ socket: dropping.path });
    await assert.rejects(client.run({ argv: ['true'] }), (e) => e instanceof ConnectionError && e.code === 'closed');
  } finally {
    await dropping.close();
  }
});

test('a frame over 1 MiB or of an unknown kind from warden ends the connection', async () => {
  for (const header of [
    [2, 0, 0, 0, 1, 0, 0x10, 0, 1],
    [9, 0, 0, 0, 1, 0, 0, 0, 0],
    [4, 0, 0, 0, 1, 0, 0, 0, 0],
  ]) {
    const warden = await scriptedWarden(async (peer) => {
      await peer.hello();
      await peer.next();
      peer.socket.write(Buffer.from(header));
      await peer.next();
    });
    try {
      const client = await connect({ socket: warden.path });
      await assert.rejects(client.run({ argv: ['true'] }), (e) => e instanceof ConnectionError && e.code === 'protocol');
    } finally {
      await warden.close();
    }
  }
});

test('close() closes the connection: warden sees its end', async () => {
  let sawEnd = false;
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello();
    await peer.next();
    sawEnd = (await peer.next()) === null;
  });
  try {
    const client = await connect({ socket: warden.path });
    const command = client.spawn({ argv: ['sleep', '9'] });
    await client.close();
    await assert.rejects(command.exit, ConnectionError);
    await sleep(50);
    assert.equal(sawEnd, true);
  } finally {
    await warden.close();
  }
});

test('shellRun: a shell line on a shared connection, outputs as text, a limit said on stderr', async () => {
  let connections = 0;
  const runs = [];
  const warden = await scriptedWarden(async (peer) => {
    connections++;
    await peer.hello();
    for (;;) {
      const run = await peer.next(30000);
      if (run === null) return;
      runs.push(run.json);
      peer.send('control', run.id, { type: 'started', command: run.id, pid: 10 });
      if (run.json.timeout_ms) {
        peer.send('stdout', run.id, Buffer.from('partial'));
        peer.send('control', run.id, exitEvent({ status: 137, code: undefined, signal: 'SIGKILL', limit: 'timeout', stdout_bytes: 7 }));
      } else {
        peer.send('stdout', run.id, Buffer.from('héllo\n'));
        peer.send('stderr', run.id, Buffer.from('warn\n'));
        peer.send('control', run.id, exitEvent({ status: 3, code: 3, stdout_bytes: 7, stderr_bytes: 5 }));
      }
    }
  });
  try {
    const one = await shellRun('echo héllo; exit 3', { folder: 'proj/x', env: { A: '1' }, socket: warden.path });
    assert.deepEqual(one, {
      exitCode: 3,
      stdout: 'héllo\n',
      stderr: 'warn\n',
      signal: null,
      limit: null,
      error: null,
      durationMs: 1.5,
    });
    const two = await shellRun('sleep 100', { timeoutMs: 50, socket: warden.path });
    assert.equal(two.exitCode, 137);
    assert.equal(two.stdout, 'partial');
    assert.equal(two.stderr, 'warden: stopped by the timeout limit (SIGKILL)\n');
    assert.equal(two.limit, 'timeout');
    assert.deepEqual(runs, [
      { type: 'run', shell: 'echo héllo; exit 3', folder: 'proj/x', env: { A: '1' } },
      { type: 'run', shell: 'sleep 100', timeout_ms: 50 },
    ]);
    assert.equal(connections, 1, 'shellRun calls share one connection');
  } finally {
    await closeShared();
    await warden.close();
  }
});

test('shellRun leaves no connection that keeps the process alive', async () => {
  const warden = await scriptedWarden(async (peer) => {
    await peer.hello();
    for (;;) {
      const run = await peer.next(30000);
      if (run === null) return;
      peer.send('control', run.id, { type: 'started', command: 1, pid: 10 });
      peer.send('stdout', run.id, Buffer.from('ok'));
      peer.send('control', run.id, exitEvent({ stdout_bytes: 2 }));
    }
  });
  try {
    const index = fileURLToPath(new URL('../index.js', import.meta.url));
    const script = `
      const { shellRun } = await import(${JSON.stringify(index)});
      const r = await shellRun('true', { socket: ${JSON.stringify(warden.path)} });
      console.log(JSON.stringify(r));`;
    const child = spawnProcess(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    let timer;
    const code = await Promise.race([
      new Promise((resolve) => child.on('exit', resolve)),
      new Promise((resolve) => {
        timer = setTimeout(() => {
          child.kill('SIGKILL');
          resolve('still running after 10 s');
        }, 10000);
      }),
    ]);
    clearTimeout(timer);
    assert.equal(code, 0);
    assert.equal(JSON.parse(out).stdout, 'ok');
  } finally {
    await warden.close();
  }
});

test('shellRun reconnects when its shared connection has ended', async () => {
  let connections = 0;
  const warden = await scriptedWarden(async (peer) => {
    connections++;
    await peer.hello();
    const run = await peer.next();
    peer.send('control', run.id, exitEvent());
    peer.socket.end(); // warden goes away after each command
  });
  try {
    for (let i = 0; i < 3; i++) {
      const r = await shellRun('true', { socket: warden.path });
      assert.equal(r.exitCode, 0);
      await sleep(30);
    }
    assert.equal(connections, 3);
  } finally {
    await closeShared();
    await warden.close();
  }
});

test('the replay notices a client that sends other frames than recorded', async () => {
  const fixture = loadFixtures().find((f) => f.name === 'run_stdout_stderr');
  const altered = structuredClone(fixture);
  altered.frames[2].json.folder = 'elsewhere';
  const fake = await replayWarden(altered, { timeoutMs: 2000 });
  try {
    const outcome = await play(fixture, fake.path, { timeoutMs: 2000 }).catch((e) => ({ crash: e }));
    await outcome.client?.close();
    const { problems } = await fake.done;
    assert.equal(problems.length, 1);
    assert.match(problems[0], /frame 2: expected/);
  } finally {
    await fake.close();
  }
});
