// Commands against fake wardens played frame by frame: run's options,
// a refused run, stdin in frames and back-pressure both ways, leaving a
// stream early, kill(), terminals (pty), late stdin.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  BadRequestError,
  MAX_FRAME,
  UnknownIdError,
  WardenError,
  connect,
} from '../index.js';
import { scriptedWarden } from '../test-support/fake-warden.js';
import { exitEvent, sleep } from '../test-support/helpers.js';

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
