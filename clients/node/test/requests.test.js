// The requests of protocol versions 4 and 8 against fake wardens played
// frame by frame: hold and handKeys (a refusal that is not fatal), runs
// and their card, detached commands.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  BadRequestError,
  RefusedError,
  UnknownIdError,
  connect,
} from '../index.js';
import { scriptedWarden } from '../test-support/fake-warden.js';
import { exitEvent, sleep } from '../test-support/helpers.js';

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
