#!/usr/bin/env node
// The Node client against sudo, from Node, side by side in one run (see
// docs/benchmarks.md): `true` run as shell through warden's API
// (client.run, one connection, the exit awaited) and through
// child_process.spawnSync('sudo', ['-u', 'shell', 'env', '-i', 'true']),
// with Node's own spawnSync('/bin/true') as the floor. The contenders take
// turns (A B C A B C ...), so the machine's drifts hit them alike.
//
// Root: warden is booted as PID 1 of fresh namespaces by the live tests'
// own support (clients/node/test-support/live-warden.js: a private copy of
// target/x86_64-unknown-linux-gnu/release/warden, or $WARDEN_BIN). sudo
// needs a user named shell with the uid warden's shell has (2001): the
// script runs in a mount namespace of its own, where /etc/passwd and
// /etc/group are the copies that warden completed at its boot, bound over
// the host's. The host's files are never written.
//
//   node bench/clients/node.mjs [--runs 200] [--warmup 20] [--json FILE]

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '../..');

function options(argv) {
  const o = { runs: 200, warmup: 20, json: null };
  for (let i = 0; i < argv.length; i++) {
    const [name, value] = [argv[i], argv[i + 1]];
    if (name === '--runs') o.runs = Number(value);
    else if (name === '--warmup') o.warmup = Number(value);
    else if (name === '--json') o.json = value;
    else throw new Error(`unknown argument ${name} (--runs N, --warmup N, --json FILE)`);
    i++;
  }
  if (!(Number.isInteger(o.runs) && o.runs > 0 && o.runs <= 100000)) throw new Error('--runs: 1 to 100000');
  if (!(Number.isInteger(o.warmup) && o.warmup >= 0 && o.warmup <= 100000)) throw new Error('--warmup: 0 to 100000');
  return o;
}

const opts = options(process.argv.slice(2));

if (process.getuid() !== 0) {
  console.error('bench/clients/node.mjs: needs root (warden boots as PID 1 of new namespaces; sudo)');
  process.exit(1);
}

// A mount namespace of our own, out of any terminal's session (so sudo's
// use_pty, on in Debian's sudoers, does not apply: the kind case for sudo).
if (process.env.WARDEN_BENCH_PRIVATE_ETC !== '1') {
  const again = spawnSync(
    'unshare',
    ['--mount', '--propagation', 'private', '--', 'setsid', '--wait', process.execPath, fileURLToPath(import.meta.url), ...process.argv.slice(2)],
    { stdio: 'inherit', env: { ...process.env, WARDEN_BENCH_PRIVATE_ETC: '1' } },
  );
  if (again.error) throw again.error;
  process.exit(again.status ?? 1);
}

const { connect, VERSION } = await import(path.join(repo, 'clients/node/index.js'));
const { bootWarden, RELEASE_BIN } = await import(path.join(repo, 'clients/node/test-support/live-warden.js'));

function must(program, args) {
  const r = spawnSync(program, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  if (r.error || r.status !== 0) {
    throw new Error(`${program} ${args.join(' ')}: ${r.error?.message ?? `exit ${r.status}`} ${r.stderr}`);
  }
  return r.stdout.toString();
}

/** sudo, or runuser when sudo is missing: the argv that runs `true` as shell. */
function switchUser() {
  for (const [program, argv] of [
    ['sudo', ['sudo', '-u', 'shell', 'env', '-i', 'true']],
    ['runuser', ['runuser', '-u', 'shell', '--', 'env', '-i', 'true']],
  ]) {
    if (spawnSync(program, ['--version'], { stdio: 'ignore' }).status === 0) return argv;
  }
  throw new Error('neither sudo nor runuser is installed');
}

function stats(times) {
  const sorted = [...times].sort((a, b) => a - b);
  const n = sorted.length;
  return {
    runs: n,
    p50: sorted[Math.floor(n / 2)],
    p95: sorted[Math.floor((n * 95) / 100)],
    mean: sorted.reduce((a, b) => a + b, 0) / n,
  };
}

const ms = (ns) => Number(ns) / 1e6;

const w = await bootWarden({ name: 'warden-bench-node' });
let client = null;
const mounted = [];
const etc = fs.mkdtempSync(path.join(os.tmpdir(), 'warden-bench-etc.'));
try {
  // The copies warden completed (shell and runtime appended), bound over /etc.
  for (const file of ['passwd', 'group']) {
    fs.copyFileSync(path.join(w.dir, 'etc', file), path.join(etc, file));
    must('mount', ['--bind', path.join(etc, file), `/etc/${file}`]);
    mounted.push(`/etc/${file}`);
  }
  const shellLine = must('getent', ['passwd', 'shell']).trim();
  if (shellLine.split(':')[2] !== String(w.config.shell.uid)) throw new Error(`shell is not warden's shell: ${shellLine}`);

  client = await connect({ socket: w.socket });
  const sudo = switchUser();
  const contenders = [
    {
      name: "client.run({ argv: ['true'] }) (one connection)",
      once: async () => {
        const r = await client.run({ argv: ['true'] });
        if (r.status !== 0) throw new Error(`true through warden: ${JSON.stringify(r)}`);
      },
    },
    {
      name: `spawnSync('${sudo[0]}', [${sudo.slice(1).map((a) => `'${a}'`).join(', ')}])`,
      once: async () => {
        const r = spawnSync(sudo[0], sudo.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
        if (r.error || r.status !== 0) throw new Error(`${sudo.join(' ')}: ${r.error?.message ?? r.status} ${r.stderr}`);
      },
    },
    {
      name: "spawnSync('/bin/true') (floor: Node's own spawn, no user switch)",
      once: async () => {
        const r = spawnSync('/bin/true', [], { stdio: ['ignore', 'pipe', 'pipe'] });
        if (r.error || r.status !== 0) throw new Error(`/bin/true: ${r.error?.message ?? r.status}`);
      },
    },
  ];
  for (const c of contenders) for (let i = 0; i < opts.warmup; i++) await c.once();
  const times = contenders.map(() => []);
  for (let i = 0; i < opts.runs; i++) {
    for (const [k, c] of contenders.entries()) {
      const start = process.hrtime.bigint();
      await c.once();
      times[k].push(ms(process.hrtime.bigint() - start));
    }
  }
  const rows = contenders.map((c, k) => ({ name: c.name, ...stats(times[k]) }));
  const [api, su] = rows;
  const cpu = os.cpus();
  console.log(
    `\nNode ${process.version}, @warden/client ${VERSION}, ${client.server} (${process.env.WARDEN_BIN || RELEASE_BIN}); ` +
      `${cpu.length} × ${cpu[0]?.model ?? 'cpu'}; ${opts.runs} runs each after ${opts.warmup} warm-up, interleaved`,
  );
  const width = Math.max(...rows.map((r) => r.name.length));
  console.log(`${'contender'.padEnd(width)}  ${'median ms'.padStart(9)}  ${'p95 ms'.padStart(7)}  ${'sudo/x'.padStart(6)}`);
  for (const r of rows) {
    console.log(`${r.name.padEnd(width)}  ${r.p50.toFixed(2).padStart(9)}  ${r.p95.toFixed(2).padStart(7)}  ${(su.p50 / r.p50).toFixed(2).padStart(6)}`);
  }
  console.log(
    `ratio ${sudo[0]}/client (Node): median ${(su.p50 / api.p50).toFixed(2)}x, p95 ${(su.p95 / api.p95).toFixed(2)}x` +
      ` (target: 3x; ${su.p50 / api.p50 >= 3 ? 'met' : 'NOT met'} at the median)`,
  );
  if (opts.json) {
    fs.writeFileSync(opts.json, `${JSON.stringify({ language: 'node', runtime: process.version, switch: sudo[0], rows }, null, 2)}\n`);
  }
} finally {
  for (const target of mounted.reverse()) spawnSync('umount', [target]);
  fs.rmSync(etc, { recursive: true, force: true });
  await client?.close();
  const { exit, log } = await w.stop();
  if (exit?.code !== 143) console.error(`warden ended with ${JSON.stringify(exit)}:\n${log}`);
}
