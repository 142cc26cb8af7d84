// The client against a real warden, booted as PID 1 of fresh namespaces
// (a private copy of the release binary; root needed). Skipped, with the
// reason, only when not root and CI is not "true"; otherwise a missing
// prerequisite fails.

import assert from 'node:assert/strict';
import { spawn as spawnProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import {
  BadRequestError,
  ConnectionError,
  GateClosedError,
  RefusedError,
  UnknownIdError,
  WardenError,
  PROTOCOL_VERSIONS,
  closeShared,
  connect,
  shellRun,
} from '../index.js';
import { auditLines, bootWarden, livePrerequisites } from '../test-support/live-warden.js';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
/** The newest version this client speaks, which warden speaks too. */
const NEWEST = PROTOCOL_VERSIONS.at(-1);
const pre = livePrerequisites();

/** Polls `check` until it returns a truthy value, at most `ms`. */
async function eventually(check, ms = 5000, what = 'a condition') {
  const deadline = Date.now() + ms;
  for (let i = 0; i < 1000 && Date.now() < deadline; i++) {
    const value = await check();
    if (value) return value;
    await sleep(25);
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}`);
}

if (!pre.run && pre.skip) {
  console.log(pre.skip);
  test('live tests against a real warden', { skip: pre.skip }, () => {});
} else if (!pre.run) {
  test('live tests against a real warden: prerequisites', () => {
    assert.fail(pre.fail);
  });
} else {
  describe('a live warden, on its own socket', () => {
    let w;
    let client;

    before(async () => {
      w = await bootWarden();
      client = await connect({ socket: w.socket });
    });

    after(async () => {
      await client?.close();
      await closeShared();
      if (w) {
        const { exit, log } = await w.stop();
        assert.equal(exit.code, 143, `warden ended with ${JSON.stringify(exit)}:\n${log}`);
      }
    });

    test('the hello agrees on the newest version, which both speak', () => {
      assert.equal(client.version, NEWEST);
      assert.match(client.server, /^warden \d+\.\d+\.\d+/);
    });

    test('output on both streams, and exit codes', async () => {
      const hi = await client.run({ argv: ['echo', 'hi'] });
      assert.equal(hi.stdout.toString(), 'hi\n');
      assert.equal(hi.stderr.length, 0);
      assert.equal(hi.status, 0);
      assert.equal(hi.code, 0);
      assert.equal(hi.signal, null);
      assert.equal(hi.drained, true);
      assert.ok(hi.pid > 0 && hi.command > 0);
      const both = await client.run({ shell: 'echo out; echo err >&2; exit 3' });
      assert.equal(both.stdout.toString(), 'out\n');
      assert.equal(both.stderr.toString(), 'err\n');
      assert.equal(both.status, 3);
      assert.equal(both.code, 3);
      const who = await client.run({ argv: ['id', '-un'] });
      assert.equal(who.stdout.toString(), 'shell\n');
      const env = await client.run({ shell: 'echo "$GREETING/$USER"', env: { GREETING: 'hello' } });
      assert.equal(env.stdout.toString(), 'hello/shell\n');
      const killed = await client.run({ shell: 'kill -TERM $$' });
      assert.equal(killed.status, 143);
      assert.equal(killed.signal, 'SIGTERM');
      assert.equal(killed.code, null);
    });

    test('a missing program: exit 127 with the error, and no started', async () => {
      const command = client.spawn({ argv: ['no-such-program-here'] });
      const report = await command.exit;
      assert.equal(await command.started, null);
      assert.equal(report.status, 127);
      assert.equal(report.code, 127);
      assert.match(report.error, /no-such-program-here/);
    });

    test('kill() signals a running sleep', async () => {
      const command = client.spawn({ argv: ['sleep', '30'] });
      const { pid, command: number } = await command.started;
      assert.ok(pid > 0 && number > 0);
      const signalled = await command.kill('TERM');
      assert.deepEqual(signalled, { type: 'signalled', target: command.id, signal: 'SIGTERM' });
      const report = await command.exit;
      assert.equal(report.status, 143);
      assert.equal(report.signal, 'SIGTERM');
      assert.ok(report.durationMs < 10000);
    });

    test('kill() right after spawn waits for the start, then signals', async () => {
      const command = client.spawn({ argv: ['sleep', '30'] });
      const signalled = await command.kill('INT');
      assert.equal(signalled.signal, 'SIGINT');
      assert.equal((await command.exit).status, 130);
    });

    test('kill() reaches the whole process group', async () => {
      const started = Date.now();
      const command = client.spawn({ shell: 'sleep 30 & sleep 30 & wait' });
      await command.started;
      await sleep(100);
      await command.kill('KILL');
      const report = await command.exit;
      assert.equal(report.signal, 'SIGKILL');
      assert.equal(report.drained, true);
      assert.ok(Date.now() - started < 10000);
    });

    test('a timeout kills the command: limit "timeout", SIGKILL, 137', async () => {
      const report = await client.run({ argv: ['sleep', '5'], timeout: 300 });
      assert.equal(report.status, 137);
      assert.equal(report.signal, 'SIGKILL');
      assert.equal(report.limit, 'timeout');
      assert.ok(report.durationMs >= 250 && report.durationMs < 4000, `took ${report.durationMs} ms`);
    });

    test('an output limit delivers exactly the limit', async () => {
      const report = await client.run({ argv: ['head', '-c', '1000000', '/dev/zero'], limits: { output_bytes: 1000 } });
      assert.equal(report.limit, 'output');
      assert.equal(report.stdout.length, 1000);
    });

    test('stdin: written as it goes, echoed as it goes, closed by end()', async () => {
      const command = client.spawn({ argv: ['cat'], stdin: 'pipe' });
      const lines = command.stdout[Symbol.asyncIterator]();
      await command.write('ping\n');
      assert.equal((await lines.next()).value.toString(), 'ping\n');
      await command.write(Buffer.from('pong\n'));
      assert.equal((await lines.next()).value.toString(), 'pong\n');
      await command.end();
      assert.equal((await lines.next()).done, true);
      const report = await command.exit;
      assert.equal(report.status, 0);
      assert.equal(report.stdoutBytes, 10);
      const whole = await client.run({ argv: ['wc', '-c'], stdin: 'x'.repeat(5000) });
      assert.equal(whole.stdout.toString().trim(), '5000');
    });

    test('binary data round trip: all 256 byte values, and 4 MiB of random bytes', async () => {
      const every = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
      const small = await client.run({ argv: ['cat'], stdin: every });
      assert.ok(small.stdout.equals(every));
      const big = randomBytes(4 << 20);
      const large = await client.run({ argv: ['cat'], stdin: big });
      assert.equal(large.stdoutBytes, big.length);
      assert.ok(large.stdout.equals(big));
      const made = await client.run({ shell: "printf '\\000\\001\\377\\n'" });
      assert.deepEqual([...made.stdout], [0, 1, 255, 10]);
    });

    test('256 MiB through the streaming form: counted, not held, in bounded time', async () => {
      const size = 268435456;
      const started = Date.now();
      global.gc?.();
      const baseline = process.memoryUsage().rss;
      let peak = baseline;
      const sampler = setInterval(() => {
        peak = Math.max(peak, process.memoryUsage().rss);
      }, 20);
      let count = 0;
      let maxHeld = 0;
      let zeros = true;
      try {
        const command = client.spawn({ argv: ['head', '-c', String(size), '/dev/zero'] });
        for await (const chunk of command.stdout) {
          count += chunk.length;
          maxHeld = Math.max(maxHeld, command.stdout.bufferedBytes);
          if (zeros && chunk[chunk.length - 1] !== 0) zeros = false;
          if (Date.now() - started > 120000) throw new Error(`only ${count} bytes after 120 s`);
        }
        const report = await command.exit;
        assert.equal(report.status, 0);
        assert.equal(report.stdoutBytes, size);
      } finally {
        clearInterval(sampler);
      }
      const seconds = (Date.now() - started) / 1000;
      console.log(`256 MiB streamed in ${seconds.toFixed(2)} s (${(size / 1048576 / seconds).toFixed(0)} MiB/s), rss grew by ${((peak - baseline) / 1048576).toFixed(1)} MiB, at most ${maxHeld} bytes held unread`);
      assert.equal(count, size);
      assert.ok(zeros);
      assert.ok(seconds < 120);
      assert.ok(peak - baseline < 128 * 1048576, `rss grew by ${peak - baseline} bytes`);
      assert.ok(maxHeld <= 2 << 20);
    });

    test('many commands at once on one connection', async () => {
      const tagged = await Promise.all(Array.from({ length: 16 }, (_, i) => client.run({ shell: 'sleep 0.2; echo "n$I"; echo "e$I" >&2', env: { I: String(i) } })));
      tagged.forEach((r, i) => {
        assert.equal(r.stdout.toString(), `n${i}\n`);
        assert.equal(r.stderr.toString(), `e${i}\n`);
      });
      const status = client.status();
      const command = client.spawn({ argv: ['sleep', '0.3'] });
      assert.equal((await status).type, 'status');
      assert.equal((await command.exit).status, 0);
    });

    test('errors: bad requests, unknown ids; the connection carries on', async () => {
      await assert.rejects(client.run({ argv: ['true'], folder: '../x' }), (e) => e instanceof BadRequestError && /may not contain/.test(e.message));
      await assert.rejects(client.run({ argv: ['true'], timout: 5 }), (e) => e instanceof BadRequestError && /unknown field `timout`/.test(e.wardenMessage));
      await assert.rejects(client.run({ argv: ['true'], limits: { cpu_secs: 1 } }), BadRequestError);
      await assert.rejects(client.run({ argv: ['true'], shell: 'true' }), BadRequestError);
      await assert.rejects(client.run({ argv: ['true'], env: { 'BAD-NAME': '1' } }), BadRequestError);
      await assert.rejects(client.audit('Not A Kind', {}), BadRequestError);
      const done = client.spawn({ argv: ['true'] });
      await done.exit;
      await assert.rejects(done.kill('TERM'), (e) => e instanceof UnknownIdError && e.code === 'unknown_id');
      const running = client.spawn({ argv: ['sleep', '5'] });
      await running.started;
      await assert.rejects(running.kill('NOT-A-SIGNAL'), BadRequestError);
      await running.kill('KILL');
      await running.exit;
      const still = await client.run({ argv: ['echo', 'still here'] });
      assert.equal(still.stdout.toString(), 'still here\n');
    });

    test('shellRun: one shell line in a folder made if missing', async () => {
      const r = await shellRun('pwd; echo oops >&2; exit 4', { folder: 'proj/deep/er', socket: w.socket });
      assert.equal(r.exitCode, 4);
      assert.equal(r.stdout, `${w.workspace}/proj/deep/er\n`);
      assert.equal(r.stderr, 'oops\n');
      const made = fs.statSync(path.join(w.workspace, 'proj/deep/er'));
      assert.equal(made.uid, 2001);
      assert.equal(made.mode & 0o777, 0o755);
      const env = await shellRun('echo "$X"; touch here', { folder: 'proj', env: { X: 'ünïcode' }, socket: w.socket });
      assert.equal(env.stdout, 'ünïcode\n');
      assert.ok(fs.existsSync(path.join(w.workspace, 'proj/here')));
      const slow = await shellRun('echo before; sleep 5', { timeoutMs: 300, socket: w.socket });
      assert.equal(slow.exitCode, 137);
      assert.equal(slow.stdout, 'before\n');
      assert.match(slow.stderr, /timeout limit/);
      const missing = await shellRun('no-such-command-x', { socket: w.socket });
      assert.equal(missing.exitCode, 127);
      assert.match(missing.stderr, /not found/);
      const parallel = await Promise.all(Array.from({ length: 8 }, (_, i) => shellRun(`echo ${i}`, { socket: w.socket })));
      parallel.forEach((p, i) => assert.equal(p.stdout, `${i}\n`));
    });

    test('status: pid 1, the newest protocol warden speaks, users, layers, the running command, activity', async () => {
      const command = client.spawn({ argv: ['sleep', '10'], folder: 'st' });
      await command.started;
      const status = await client.status();
      assert.equal(status.type, 'status');
      assert.equal(status.protocol, NEWEST); // the newest warden speaks, as this client does
      assert.equal(status.pid1, true);
      assert.ok(Number.isInteger(status.activity.idle_ms) && status.activity.idle_ms >= 0);
      assert.equal(status.activity.idle_stop_s, undefined, 'no idle stop in this config');
      assert.deepEqual(
        status.users.map((u) => [u.name, u.uid]),
        [
          ['runtime', 2000],
          ['shell', 2001],
        ],
      );
      assert.ok(status.layers.find((l) => l.layer === 'landlock').holds);
      assert.ok(status.layout.every((p) => p.ok));
      const mine = status.running.find((r) => r.pid === command.pid);
      assert.ok(mine, 'the running command is listed');
      assert.equal(mine.folder, 'st');
      assert.deepEqual(mine.argv, ['sleep', '10']);
      assert.ok(status.shell_process_count >= 1);
      assert.equal(status.audit_log, w.auditLog);
      await command.kill('KILL');
      await command.exit;
    });

    test('audit: recorded with its sequence number, in the log', async () => {
      const answer = await client.audit('node_client_test', { file: 'notes.md', n: 1 });
      assert.equal(answer.type, 'recorded');
      assert.ok(Number.isInteger(answer.seq));
      const line = await eventually(() => auditLines(w).find((l) => l.seq === answer.seq), 5000, 'the audit line');
      assert.equal(line.kind, 'runtime');
      assert.equal(line.event, 'node_client_test');
      assert.deepEqual(line.fields, { file: 'notes.md', n: 1 });
      assert.equal(line.from_uid, 0);
    });

    test('reload: the network policy read again; a bad file is a bad_request', async () => {
      const policy = path.join(w.dir, 'policy/network.json');
      const good = fs.readFileSync(policy, 'utf8');
      const reloaded = await client.reload();
      assert.equal(reloaded.type, 'reloaded');
      assert.equal(reloaded.hosts_from, 'network.json');
      assert.deepEqual(reloaded.hosts, ['github.com']);
      fs.writeFileSync(policy, '{"hosts": 5}\n');
      try {
        await assert.rejects(client.reload(), (e) => e instanceof BadRequestError && /last good network policy holds/.test(e.message));
      } finally {
        fs.writeFileSync(policy, good);
      }
      assert.equal((await client.reload()).type, 'reloaded');
    });

    test('stopShell: a process left behind in a session of its own is found and stopped', async () => {
      // The pause lets setsid act before the command ends. warden ends
      // what a command leaves behind, wherever it went, unless it keeps
      // its background: this one does.
      const left = await client.run({ shell: 'setsid sleep 300 </dev/null >/dev/null 2>&1 & sleep 0.5; echo started', keepBackground: true });
      assert.equal(left.stdout.toString(), 'started\n');
      const before = await eventually(async () => {
        const s = await client.status();
        return s.shell_processes.some((p) => p.name === 'sleep') && s;
      }, 5000, 'the escaped sleep in status');
      assert.ok(before.shell_process_count >= 1);
      const stopped = await client.stopShell();
      assert.equal(stopped.type, 'shell_stopped');
      assert.ok(stopped.signalled >= 1);
      assert.equal(stopped.left, 0);
      const after = await eventually(async () => {
        const s = await client.status();
        return s.shell_process_count === 0 && s;
      }, 5000, 'no process of shell');
      assert.deepEqual(after.shell_processes, []);
    });

    test('the gate: closed, every run is refused with its reason; opened, runs again', async () => {
      const closed = await client.closeGate('a tool read a web page in this reply');
      assert.equal(closed.closed, true);
      try {
        await assert.rejects(
          client.run({ argv: ['true'] }),
          (e) => e instanceof GateClosedError && /read a web page/.test(e.message),
        );
        const s = await client.status();
        assert.equal(s.gate.closed, true);
      } finally {
        assert.equal((await client.openGate()).closed, false);
      }
      assert.equal((await client.run({ argv: ['true'] })).status, 0);
    });

    test('ready (version 9): noted once, in status().ready and the audit log', async () => {
      assert.deepEqual((await client.status()).ready, {}, 'this warden waits for nothing: ready as it answers');
      const since = await client.ready();
      assert.ok(Number.isInteger(since) && since >= 0);
      assert.equal(await client.ready(), since, 'said again, the first time stands');
      assert.deepEqual((await client.status()).ready, { after_ms: since, by: 'runtime' });
      const lines = auditLines(w).filter((l) => l.kind === 'ready');
      assert.equal(lines.length, 1);
      assert.equal(lines[0].after_ms, since);
    });

    test('nextJob (version 9): in status().activity and the audit log until 0 lets go', async () => {
      const at = Date.now() + 3_600_000;
      assert.equal(await client.nextJob(at), at);
      assert.equal((await client.status()).activity.next_job_at_ms, at);
      const line = await eventually(() => auditLines(w).find((l) => l.kind === 'next_job' && l.at_ms === at), 5000, 'the job in the audit log');
      assert.equal(line.requester_uid, 0);
      assert.equal(await client.nextJob(0), 0);
      assert.equal((await client.status()).activity.next_job_at_ms, undefined);
    });

    test('hold (version 4): in force and in status().activity until a time past lets go; a week ahead at most', async () => {
      assert.equal((await client.status()).activity.held_until_ms, undefined);
      const until = Date.now() + 3_600_000;
      assert.equal(await client.hold(until), until);
      try {
        assert.equal((await client.status()).activity.held_until_ms, until);
        await assert.rejects(
          client.hold(Date.now() + 8 * 24 * 3_600_000),
          (e) => e instanceof BadRequestError && /more than a week/.test(e.message) && !e.fatal,
        );
        assert.equal((await client.status()).activity.held_until_ms, until, 'a refused hold leaves the one in force');
        const line = await eventually(() => auditLines(w).find((l) => l.kind === 'hold' && l.until_ms === until), 5000, 'the hold in the audit log');
        assert.equal(line.requester_uid, 0);
      } finally {
        assert.equal(await client.hold(Date.now() - 1000), 0, 'a time past lets go');
      }
      assert.equal((await client.status()).activity.held_until_ms, undefined);
      assert.equal(await client.hold(Date.now() + 60_000) > 0, true);
      assert.equal(await client.hold(0), 0);
      assert.equal((await client.status()).activity.held_until_ms, undefined);
    });

    test('beginRun, endRun and card (version 8): a run with no provider traffic lists the commands it ran, at zero spend', async () => {
      assert.equal(await client.beginRun('node-run', 0.25), 250_000);
      await assert.rejects(client.beginRun('node-run'), (e) => e instanceof BadRequestError && !e.fatal, 'a run open already');
      const open = await client.card('node-run');
      assert.equal(open.how, 'open');
      assert.equal(open.ended, null);
      const failed = await client.run({ shell: 'echo no >&2; exit 3' });
      assert.equal(failed.code, 3);
      const slow = await client.run({ argv: ['sleep', '30'], timeout: 300 });
      assert.equal(slow.limit, 'timeout');
      const ended = await client.endRun('node-run');
      assert.deepEqual(ended, { type: 'run_ended', run: 'node-run', spent_micro_usd: 0, how: 'ended' });
      const card = await client.card('node-run');
      assert.equal(card.run, 'node-run');
      assert.equal(card.how, 'ended');
      assert.equal(typeof card.began, 'string');
      assert.equal(typeof card.ended, 'string');
      assert.equal(card.budget_micro_usd, 250_000);
      assert.equal(card.spent_micro_usd, 0);
      assert.deepEqual(card.models, []);
      assert.deepEqual(card.requests, []);
      assert.equal(card.commands.length, 2, JSON.stringify(card.commands));
      assert.deepEqual(card.commands[0].argv.slice(-1), ['echo no >&2; exit 3']);
      assert.equal(card.commands[0].exit, 3);
      assert.equal(card.commands[0].limit, null);
      assert.deepEqual(card.commands[1].argv, ['sleep', '30']);
      assert.equal(card.commands[1].limit, 'timeout');
      assert.ok(card.commands[1].duration_ms >= 300);
      const begun = auditLines(w).find((l) => l.kind === 'run_begin' && l.run === 'node-run');
      assert.equal(begun.budget_micro_usd, 250_000);
      await assert.rejects(client.endRun('node-run'), BadRequestError, 'ended already');
      await assert.rejects(client.card('never-begun'), BadRequestError);
      await assert.rejects(client.beginRun(''), TypeError);
      await assert.rejects(client.beginRun('x', -1), TypeError);
      assert.equal((await client.run({ argv: ['true'] })).status, 0, 'the connection goes on');
    });

    test('handKeys on the machine\'s own socket: a RefusedError, and the connection goes on', async () => {
      const env = path.join(w.dir, 'home/runtime/.env');
      await assert.rejects(
        client.handKeys('API_TOKEN=canary-local-123\n'),
        (e) => e instanceof RefusedError && e.code === 'refused' && e.fatal === false && /host's door only/.test(e.message),
      );
      assert.equal(client.closed, false);
      assert.equal((await client.run({ argv: ['echo', 'still here'] })).stdout.toString(), 'still here\n');
      assert.ok(!fs.existsSync(env) || !fs.readFileSync(env, 'utf8').includes('canary-local-123'), '.env was not written');
    });

    test('as the runtime user the client gets in; as another uid it is refused', async () => {
      const index = fileURLToPath(new URL('../index.js', import.meta.url));
      const script = `
        const { connect } = await import(${JSON.stringify(index)});
        try {
          const c = await connect({ socket: ${JSON.stringify(w.socket)} });
          const r = await c.run({ argv: ['id', '-un'] });
          console.log(JSON.stringify({ ok: r.stdout.toString().trim() }));
          await c.close();
        } catch (e) {
          console.log(JSON.stringify({ name: e.name, code: e.code, message: e.message }));
        }`;
      const as = (uid, gid) =>
        new Promise((resolve, reject) => {
          const child = spawnProcess(process.execPath, ['--input-type=module', '-e', script], { uid, gid, cwd: '/', stdio: ['ignore', 'pipe', 'pipe'] });
          let out = '';
          let err = '';
          child.stdout.on('data', (d) => (out += d));
          child.stderr.on('data', (d) => (err += d));
          const timer = setTimeout(() => child.kill('SIGKILL'), 20000);
          child.on('error', reject);
          child.on('exit', (code) => {
            clearTimeout(timer);
            try {
              resolve(JSON.parse(out));
            } catch {
              reject(new Error(`uid ${uid}: exit ${code}: ${out} ${err}`));
            }
          });
        });
      assert.deepEqual(await as(2000, 2000), { ok: 'shell' });
      // shell's uid with the runtime's group: the socket's mode lets it connect, warden's check does not.
      const refused = await as(2001, 2000);
      assert.equal(refused.name, 'RefusedError', JSON.stringify(refused));
      assert.equal(refused.code, 'refused');
      assert.match(refused.message, /uid 2001/);
    });

    test('pty (version 4): the terminal is stdin, stdout and stderr, of the size asked for', async () => {
      const size = await client.run({ argv: ['stty', 'size'], pty: { rows: 30, cols: 100 } });
      assert.equal(size.status, 0, size.stdout.toString());
      assert.equal(size.stdout.toString(), '30 100\r\n');
      const tty = await client.run({ shell: 'test -t 0 && test -t 1 && test -t 2 && echo all three; echo err >&2', pty: { rows: 24, cols: 80 } });
      assert.equal(tty.status, 0);
      assert.equal(tty.stdout.toString(), 'all three\r\nerr\r\n', 'a terminal has one stream');
      assert.equal(tty.stderr.length, 0);
      assert.equal(tty.stderrBytes, 0);
      const plain = await client.run({ shell: 'test -t 0 || test -t 1 || test -t 2' });
      assert.equal(plain.status, 1, 'without pty, no terminal');
      // What run() is given as stdin is typed: echoed by the terminal, read by the command.
      const typed = await client.run({ shell: 'read x; echo "got $x"', stdin: 'abc\r', pty: { rows: 24, cols: 80 } });
      assert.equal(typed.stdout.toString(), 'abc\r\ngot abc\r\n');
    });

    test('pty: resize() changes the size stty reports', async () => {
      const command = client.spawn({ shell: 'stty size; read line; stty size', pty: { rows: 24, cols: 80 } });
      assert.deepEqual(command.terminal, { rows: 24, cols: 80 });
      const chunks = command.stdout[Symbol.asyncIterator]();
      let screen = '';
      const until = async (text) => {
        while (!screen.includes(text)) {
          const { value, done } = await chunks.next();
          assert.ok(!done, `no ${JSON.stringify(text)} in ${JSON.stringify(screen)}`);
          screen += value.toString();
        }
      };
      await until('24 80\r\n');
      assert.deepEqual(await command.resize(40, 120), { type: 'resized', target: command.id, rows: 40, cols: 120 });
      assert.deepEqual(command.terminal, { rows: 40, cols: 120 });
      await assert.rejects(command.resize(1001, 80), (e) => e instanceof BadRequestError && /1 to 1000/.test(e.message));
      await command.write('\r');
      await until('40 120\r\n');
      const report = await command.exit;
      assert.equal(report.status, 0);
      assert.equal(screen, '24 80\r\n\r\n40 120\r\n');
    });

    test('pty: Ctrl-C (byte 3) is SIGINT for the foreground job', async () => {
      const started = Date.now();
      const sleeper = client.spawn({ argv: ['sleep', '100'], pty: { rows: 24, cols: 80 } });
      const screen = sleeper.stdout.text();
      await sleeper.started;
      await sleeper.write('\x03');
      const report = await sleeper.exit;
      assert.equal(report.status, 130);
      assert.equal(report.signal, 'SIGINT');
      assert.equal(await screen, '^C');
      // A shell that traps it: its wait ends, the trap runs (the background sleep ignores SIGINT, as without job control).
      const trapped = client.spawn({ shell: 'trap "echo INT; exit 9" INT; echo ready; sleep 100 & wait', pty: { rows: 24, cols: 80 } });
      const chunks = trapped.stdout[Symbol.asyncIterator]();
      let seen = '';
      while (!seen.includes('ready\r\n')) {
        const { value, done } = await chunks.next();
        assert.ok(!done, seen);
        seen += value.toString();
      }
      await trapped.write(Buffer.from([3]));
      for (let next = await chunks.next(); !next.done; next = await chunks.next()) seen += next.value.toString();
      const ended = await trapped.exit;
      assert.equal(ended.status, 9, seen);
      assert.match(seen, /ready\r\n(\^C)?INT\r\n$/);
      assert.ok(Date.now() - started < 20000);
    });

    test('pty: resize of a command without a terminal is unknown_id; a bad size is bad_request', async () => {
      const plain = client.spawn({ argv: ['sleep', '30'] });
      await plain.started;
      await assert.rejects(plain.resize(24, 80), (e) => e instanceof UnknownIdError && /terminal/.test(e.message) && !e.fatal);
      await plain.kill('KILL');
      await plain.exit;
      await assert.rejects(client.run({ argv: ['true'], pty: { rows: 0, cols: 80 } }), (e) => e instanceof BadRequestError && /1 to 1000/.test(e.message));
      await assert.rejects(client.run({ argv: ['true'], pty: { rows: 24 } }), BadRequestError);
      assert.equal((await client.run({ argv: ['echo', 'still here'] })).stdout.toString(), 'still here\n');
    });

    test('detach (version 4): a tagged command outlives its connection; another lists it, attaches (what it printed, then live, then its exit) and waits', async () => {
      const first = await connect({ socket: w.socket });
      const line = 'echo first; echo oops >&2; sleep 1.5; echo second; exit 5';
      const started = await first.run({ shell: line, detach: true, tag: 'nightly build' });
      assert.ok(started.command > 0 && started.pid > 0, JSON.stringify(started));
      assert.equal(started.tag, 'nightly build');
      assert.equal(started.exit, null);
      await first.close();

      const other = await connect({ socket: w.socket });
      try {
        const listed = (await other.list()).find((c) => c.command === started.command);
        assert.ok(listed, 'listed by another connection');
        assert.equal(listed.tag, 'nightly build');
        assert.equal(listed.state, 'running', JSON.stringify(listed));
        assert.equal(listed.pid, started.pid);
        assert.ok(listed.argv.some((a) => a.includes('echo first')), JSON.stringify(listed.argv));
        assert.equal(listed.attached, 0);
        assert.ok(listed.started_ms > Date.now() - 60_000 && listed.started_ms <= Date.now());
        // Let it print its first lines to nobody: they come as the backlog.
        await sleep(300);
        const attachment = other.attach(started.command);
        const chunks = [];
        const out = (async () => {
          for await (const chunk of attachment.stdout) chunks.push({ text: chunk.toString(), at: Date.now() });
        })();
        const err = attachment.stderr.text();
        assert.deepEqual(await attachment.attached, { command: started.command, droppedBytes: 0 });
        const attachedAt = Date.now();
        assert.equal((await other.list()).find((c) => c.command === started.command).attached, 1);
        const report = await attachment.exit;
        await out;
        assert.equal(chunks.map((c) => c.text).join(''), 'first\nsecond\n');
        assert.equal(chunks[0].text, 'first\n');
        assert.ok(chunks.at(-1).at - attachedAt > 500, 'the second line came live, after the attachment');
        assert.equal(await err, 'oops\n');
        assert.equal(report.status, 5);
        assert.equal(report.code, 5);
        assert.equal(report.command, started.command);
        // Ended: wait answers at once; attach gives it all again; list says so.
        const waited = await other.wait(started.command);
        assert.equal(waited.status, 5);
        assert.equal(waited.stdout, null);
        const again = other.attach(started.command);
        const [text, ended] = await Promise.all([again.stdout.text(), again.exit, again.stderr.discard()]);
        assert.equal(text, 'first\nsecond\n');
        assert.equal(ended.status, 5);
        const gone = (await other.list()).find((c) => c.command === started.command);
        assert.equal(gone.state, 'exited');
        assert.equal(gone.exit.status, 5);
        const kinds = new Set(auditLines(w).map((l) => l.kind));
        for (const kind of ['command_attached', 'command_waited']) assert.ok(kinds.has(kind), `${kind} in the audit log`);
      } finally {
        await other.close();
      }
    });

    test('detach: a cat fed through an attachment, its stdin closed by end(); stdin to one without any is an unknown_id kept aside', async () => {
      const cat = await client.detach({ argv: ['cat'], stdin: 'pipe', tag: 'cat' });
      assert.equal(cat.tag, 'cat');
      const attachment = client.attach(cat.command);
      const lines = attachment.stdout[Symbol.asyncIterator]();
      await attachment.write('typed later\n');
      assert.equal((await lines.next()).value.toString(), 'typed later\n');
      await attachment.write(Buffer.from('and more\n'));
      assert.equal((await lines.next()).value.toString(), 'and more\n');
      await attachment.end();
      assert.equal((await lines.next()).done, true);
      const report = await attachment.exit;
      assert.equal(report.status, 0);
      assert.equal(report.stdoutBytes, 21);
      assert.deepEqual(attachment.stdinErrors, []);

      const deaf = await client.detach({ shell: 'sleep 0.5' });
      const follower = client.attach(deaf.command);
      await follower.attached;
      await follower.write('nobody reads this\n');
      assert.equal((await follower.exit).status, 0);
      assert.equal(follower.stdinErrors.length, 1);
      assert.ok(follower.stdinErrors[0] instanceof UnknownIdError && /no open stdin/.test(follower.stdinErrors[0].message));
    });

    test('detach with a pty: the attachment resizes its terminal', async () => {
      const sh = await client.detach({ shell: 'stty size; read line; stty size', pty: { rows: 24, cols: 80 } });
      const attachment = client.attach(sh.command);
      const chunks = attachment.stdout[Symbol.asyncIterator]();
      let screen = '';
      while (!screen.includes('24 80\r\n')) {
        const { value, done } = await chunks.next();
        assert.ok(!done, screen);
        screen += value.toString();
      }
      assert.deepEqual(await attachment.resize(40, 120), { type: 'resized', target: attachment.id, rows: 40, cols: 120 });
      assert.deepEqual(attachment.terminal, { rows: 40, cols: 120 });
      await attachment.write('\r');
      for (let next = await chunks.next(); !next.done; next = await chunks.next()) screen += next.value.toString();
      assert.equal((await attachment.exit).status, 0);
      assert.equal(screen, '24 80\r\n\r\n40 120\r\n');
    });

    test('signalCommand TERM to a detached sleep, then wait: 143; signalled again, an UnknownIdError', async () => {
      const sleeper = await client.detach({ argv: ['sleep', '100'] });
      const waiting = client.wait(sleeper.command);
      assert.deepEqual(await client.signalCommand(sleeper.command, 'TERM'), {
        type: 'command_signalled',
        command: sleeper.command,
        signal: 'SIGTERM',
      });
      const report = await waiting;
      assert.equal(report.status, 143);
      assert.equal(report.signal, 'SIGTERM');
      assert.equal((await client.wait(sleeper.command)).status, 143, 'waited again: at once');
      await assert.rejects(client.signalCommand(sleeper.command, 'TERM'), (e) => e instanceof UnknownIdError && !e.fatal);
      // An attachment's kill() is signalCommand.
      const other = await client.detach({ argv: ['sleep', '100'] });
      const attachment = client.attach(other.command);
      await attachment.attached;
      assert.equal((await attachment.kill('KILL')).signal, 'SIGKILL');
      assert.equal((await attachment.exit).status, 137);
    });

    test('detach: unknown commands, a tag without detach, a bad tag, a missing program', async () => {
      const attachment = client.attach(999_999);
      await assert.rejects(attachment.attached, (e) => e instanceof UnknownIdError && e.code === 'unknown_id' && /999999/.test(e.message) && !e.fatal);
      await assert.rejects(attachment.exit, UnknownIdError);
      await assert.rejects(attachment.stdout.text(), UnknownIdError);
      await assert.rejects(client.wait(999_999), UnknownIdError);
      await assert.rejects(client.signalCommand(999_999), UnknownIdError);
      await assert.rejects(client.run({ argv: ['true'], tag: 'lonely' }), (e) => e instanceof BadRequestError && /tag goes with detach/.test(e.message));
      await assert.rejects(client.detach({ argv: ['true'], tag: '' }), (e) => e instanceof BadRequestError && /tag/.test(e.message));
      await assert.rejects(client.detach({ argv: ['true'], tag: 'x'.repeat(129) }), BadRequestError);
      await assert.rejects(client.detach({ argv: ['cat'], stdin: 'bytes' }), TypeError);
      assert.throws(() => client.spawn({ argv: ['true'], detach: true }), TypeError);
      const missing = await client.detach({ argv: ['no-such-program-here'], tag: 'missing' });
      assert.equal(missing.command, null);
      assert.equal(missing.tag, 'missing');
      assert.equal(missing.exit.status, 127);
      assert.match(missing.exit.error, /no-such-program-here/);
      assert.equal((await client.run({ argv: ['echo', 'still here'] })).stdout.toString(), 'still here\n');
    });

    test('closing a connection kills the commands it started', async () => {
      const other = await connect({ socket: w.socket });
      const command = other.spawn({ argv: ['sleep', '300'] });
      const { pid } = await command.started;
      await other.close();
      // warden kills it as it sees the end: its exit may still arrive before the socket closes.
      const end = await command.exit.catch((e) => e);
      assert.ok(end instanceof ConnectionError || end.signal === 'SIGKILL', `ended with ${JSON.stringify(end)}`);
      await eventually(async () => !(await client.status()).running.some((r) => r.pid === pid), 5000, 'the command to go');
    });
  });

  describe('a live warden, through its host socket', () => {
    let w;

    before(async () => {
      w = await bootWarden({ host: true });
    });

    after(async () => {
      await closeShared();
      if (w) await w.stop();
    });

    test('the host socket is the owner\'s: root\'s, 0600', () => {
      const meta = fs.statSync(w.hostSocket);
      assert.equal(meta.mode & 0o777, 0o600);
      assert.equal(meta.uid, 0);
    });

    test('the machine\'s key lets the client in, and it runs a command', async () => {
      const client = await connect({ socket: w.hostSocket, key: w.key });
      assert.equal(client.version, NEWEST);
      const r = await client.run({ argv: ['id', '-un'] });
      assert.equal(r.stdout.toString(), 'shell\n');
      const viaShellRun = await shellRun('echo from the host', { socket: w.hostSocket, key: w.key });
      assert.equal(viaShellRun.stdout, 'from the host\n');
      await client.close();
    });

    test('a wrong key, or none, is refused', async () => {
      const started = Date.now();
      await assert.rejects(connect({ socket: w.hostSocket, key: 'f'.repeat(64) }), (e) => e instanceof RefusedError && e.code === 'refused' && e instanceof WardenError);
      assert.ok(Date.now() - started >= 400, 'a refusal waits half a second');
      await assert.rejects(connect({ socket: w.hostSocket }), (e) => e instanceof WardenError && e.code === 'refused' && /no key/.test(e.message));
      await assert.rejects(shellRun('true', { socket: w.hostSocket, key: 'wrong'.repeat(13) }), RefusedError);
      const refusals = auditLines(w).filter((l) => l.kind === 'connection_refused');
      assert.ok(refusals.length >= 2);
    });

    test('handKeys (version 4) through the host socket: the runtime\'s .env, its names only in the audit log', async () => {
      const client = await connect({ socket: w.hostSocket, key: w.key });
      try {
        const text = 'API_TOKEN=canary-node-123\n# a comment\n\nexport OTHER=x=y\n';
        assert.deepEqual(await client.handKeys(text), ['API_TOKEN', 'OTHER']);
        const env = path.join(w.dir, 'home/runtime/.env');
        assert.equal(fs.readFileSync(env, 'utf8'), text);
        const meta = fs.lstatSync(env);
        assert.equal(meta.mode & 0o777, 0o600);
        assert.equal(meta.uid, 2000);
        await assert.rejects(client.handKeys('not a key line\n'), (e) => e instanceof BadRequestError && /line 1/.test(e.message));
        assert.equal(fs.readFileSync(env, 'utf8'), text, 'a refused text changes nothing');
        const line = await eventually(() => auditLines(w).find((l) => l.kind === 'keys_handed'), 5000, 'keys_handed in the audit log');
        assert.deepEqual(line.names, ['API_TOKEN', 'OTHER']);
        assert.ok(!fs.readFileSync(w.auditLog, 'utf8').includes('canary-node-123'), 'no value in the audit log');
        assert.equal((await client.run({ argv: ['true'] })).status, 0);
      } finally {
        await client.close();
      }
    });

    test('shutdown (version 2) through the host socket stops the machine', async () => {
      const client = await connect({ socket: w.hostSocket, key: w.key });
      const answer = await client.shutdown();
      assert.equal(answer.type, 'shutting_down');
      const { exit } = await w.stop();
      assert.ok(exit.code !== null, `warden ended with ${JSON.stringify(exit)}`);
      w = null;
      await client.close();
    });
  });
}
