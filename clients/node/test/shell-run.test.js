// shellRun against fake wardens: a shell line on a shared connection,
// which never keeps the process alive and is made again once it ended.

import assert from 'node:assert/strict';
import { spawn as spawnProcess } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import {
  closeShared,
  shellRun,
} from '../index.js';
import { scriptedWarden } from '../test-support/fake-warden.js';
import { exitEvent, sleep } from '../test-support/helpers.js';

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
