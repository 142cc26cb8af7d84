// Boots a real warden as PID 1 of fresh namespaces, as
// scripts/demo-namespace does, for the live tests and the fixture
// recorder. Needs root. Everything lives in a folder under /var/tmp that
// stop() removes (KEEP=1 keeps it).

import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect } from '../index.js';

const here = path.dirname(fileURLToPath(import.meta.url));
export const REPO = path.resolve(here, '../../..');
export const RELEASE_BIN = process.env.WARDEN_BIN || path.join(REPO, 'target/x86_64-unknown-linux-gnu/release/warden');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function onPath(program) {
  for (const dir of (process.env.PATH || '/usr/sbin:/usr/bin:/sbin:/bin').split(':')) {
    try {
      fs.accessSync(path.join(dir, program), fs.constants.X_OK);
      return true;
    } catch {
      // not here
    }
  }
  return false;
}

/**
 * Whether the live tests can run here: {run: true}, or {run: false, skip}
 * with the reason to print, or {run: false, fail} when they must fail:
 * they skip only when not root and CI is not "true".
 */
export function livePrerequisites() {
  const missing = [];
  const root = typeof process.getuid === 'function' && process.getuid() === 0;
  if (!root) missing.push(`not root (uid ${process.getuid?.()}): booting warden as PID 1 of new namespaces needs root`);
  if (process.platform !== 'linux') missing.push(`not Linux (${process.platform})`);
  if (!fs.existsSync(RELEASE_BIN)) missing.push(`no release binary at ${RELEASE_BIN} (cargo build --release)`);
  for (const program of ['unshare', 'mount']) if (!onPath(program)) missing.push(`${program} is not on PATH (util-linux)`);
  if (missing.length === 0) return { run: true };
  const reason = missing.join('; ');
  if (!root && process.env.CI !== 'true') return { run: false, skip: `live tests skipped: ${reason}` };
  return { run: false, fail: `live tests cannot run: ${reason}` };
}

const booted = new Set();
process.on('exit', () => {
  // A test run that ends abruptly leaves no warden behind.
  for (const w of booted) w.killNow();
});

/**
 * Boots warden. Options: `host` (also a host socket with a machine key),
 * `main` (the main process's argv), `network` (policy/network.json; null:
 * none, the default host list). Resolves to a handle with `socket`,
 * `hostSocket`, `key`, `dir`, `auditLog`, `log()`, `stop()`.
 */
export async function bootWarden({
  host = false,
  main = ['sleep', 'infinity'],
  name = 'warden-node',
  // A host list of its own: otherwise warden asks the machine's tools
  // (npm, pip3...) as shell after boot, and those show up as shell's
  // processes in status and stop_shell for a few seconds.
  network = { hosts: ['github.com'] },
} = {}) {
  const dir = fs.mkdtempSync(`/var/tmp/${name}.`);
  fs.chmodSync(dir, 0o755);
  const bin = path.join(dir, 'warden');
  // A private copy: the release binary may be rebuilt under the tests.
  fs.copyFileSync(RELEASE_BIN, bin);
  fs.chmodSync(bin, 0o755);
  fs.mkdirSync(path.join(dir, 'etc'));
  fs.copyFileSync('/etc/passwd', path.join(dir, 'etc/passwd'));
  fs.copyFileSync('/etc/group', path.join(dir, 'etc/group'));
  fs.mkdirSync(path.join(dir, 'policy'), { mode: 0o755 });
  if (network) fs.writeFileSync(path.join(dir, 'policy/network.json'), `${JSON.stringify(network)}\n`);
  const config = {
    runtime: { name: 'runtime', uid: 2000, gid: 2000, home: path.join(dir, 'home/runtime') },
    shell: { name: 'shell', uid: 2001, gid: 2001, home: path.join(dir, 'home/shell') },
    socket: path.join(dir, 'run/api.sock'),
    // warden makes shell_tmp's parent root's and 0700: a folder of its own.
    shell_tmp: path.join(dir, 'root-only/shell-tmp'),
    policy_dir: path.join(dir, 'policy'),
    grace_period_ms: 2000,
  };
  let key = null;
  if (host) {
    fs.mkdirSync(path.join(dir, 'host'), { mode: 0o700 });
    key = randomBytes(32).toString('hex');
    const keyFile = path.join(dir, 'key');
    fs.writeFileSync(keyFile, `${key}\n`, { mode: 0o600 });
    fs.chmodSync(keyFile, 0o600);
    config.host_socket = path.join(dir, 'host/api.sock');
    config.key_file = keyFile;
  }
  fs.writeFileSync(path.join(dir, 'machine.json'), `${JSON.stringify(config, null, 2)}\n`);
  const logPath = path.join(dir, 'warden.log');
  const logFd = fs.openSync(logPath, 'a');
  const script =
    'mount --bind "$1/etc/passwd" /etc/passwd && mount --bind "$1/etc/group" /etc/group && ' +
    'cfg="$1/machine.json" && shift && exec "$0" init --config "$cfg" -- "$@"';
  const child = spawn(
    'unshare',
    ['--pid', '--fork', '--net', '--mount', '--mount-proc', '--propagation', 'private', '--', 'sh', '-c', script, bin, dir, ...main],
    { stdio: ['ignore', logFd, logFd] },
  );
  fs.closeSync(logFd);
  let exited = null;
  const exit = new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      exited = { code, signal };
      resolve(exited);
    });
    child.on('error', (error) => {
      exited = { code: null, signal: null, error };
      resolve(exited);
    });
  });
  const log = () => {
    try {
      return fs.readFileSync(logPath, 'utf8');
    } catch {
      return '';
    }
  };
  const wardenPid = () => {
    try {
      const text = fs.readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').trim();
      const pid = Number(text.split(/\s+/)[0]);
      return Number.isInteger(pid) && pid > 0 ? pid : null;
    } catch {
      return null;
    }
  };
  const handle = {
    dir,
    bin,
    config,
    socket: config.socket,
    hostSocket: config.host_socket ?? null,
    key,
    auditLog: path.join(dir, 'home/runtime/data/audit/warden.jsonl'),
    workspace: path.join(dir, 'home/runtime/workspace'),
    log,
    pid: null,
    kill() {
      const pid = wardenPid();
      try {
        if (pid) process.kill(pid, 'SIGKILL');
      } catch {
        // gone already
      }
    },
    /** For a test run that ends abruptly: kill, and remove the folder. */
    killNow() {
      handle.kill();
      if (process.env.KEEP !== '1') fs.rmSync(dir, { recursive: true, force: true });
    },
    async stop() {
      booted.delete(handle);
      const pid = wardenPid();
      if (exited === null && pid) process.kill(pid, 'SIGTERM');
      const deadline = Date.now() + 20000;
      while (exited === null && Date.now() < deadline) await sleep(20);
      if (exited === null) {
        handle.kill();
        await Promise.race([exit, sleep(5000)]);
      }
      const text = log();
      if (process.env.KEEP === '1') console.error(`# kept ${dir}`);
      else fs.rmSync(dir, { recursive: true, force: true });
      return { exit: exited, log: text };
    },
  };
  booted.add(handle);
  // The socket appears once bound; warden serves it once every layer is proven.
  const sockets = [config.socket, ...(config.host_socket ? [config.host_socket] : [])];
  const deadline = Date.now() + 20000;
  for (let i = 0; i < 2000 && Date.now() < deadline; i++) {
    if (exited !== null) break;
    if (sockets.every((s) => fs.existsSync(s))) break;
    await sleep(10);
  }
  if (exited !== null || !sockets.every((s) => fs.existsSync(s))) {
    const text = log();
    await handle.stop();
    throw new Error(`warden did not come up (${JSON.stringify(exited)}):\n${text}`);
  }
  handle.pid = wardenPid();
  let lastError = null;
  for (let i = 0; i < 100 && Date.now() < deadline; i++) {
    try {
      const client = await connect({ socket: config.socket, timeoutMs: 10000 });
      await client.close();
      lastError = null;
      break;
    } catch (error) {
      lastError = error;
      await sleep(50);
    }
  }
  if (lastError) {
    const text = log();
    await handle.stop();
    throw new Error(`warden's socket does not answer: ${lastError.message}\n${text}`);
  }
  return handle;
}

/** Lines of warden's audit log, parsed. */
export function auditLines(handle) {
  return fs
    .readFileSync(handle.auditLog, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line));
}

