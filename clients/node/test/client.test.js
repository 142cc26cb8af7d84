// The client against fake wardens played frame by frame: the error
// classes, frames, the socket and the hello, many commands on one
// connection, requests on id 0, fatal errors and the connection's end.
// Commands are in commands.test.js, the requests of versions 4 and 8 in
// requests.test.js, shellRun in shell-run.test.js.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  BadRequestError,
  ConnectionError,
  ERROR_CLASSES,
  ERROR_CODES,
  MAX_FRAME,
  PROTOCOL_VERSIONS,
  WardenError,
  connect,
  encodeFrame,
} from '../index.js';
import { play } from '../test-support/calls.js';
import { replayWarden, scriptedWarden } from '../test-support/fake-warden.js';
import { loadFixtures } from '../test-support/frames.js';
import { exitEvent, sleep } from '../test-support/helpers.js';

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
