// shellRun: an agent's shell tool in one call, on connections kept per
// socket and key.

import { DEFAULT_SOCKET, connect } from './client.js';

// One client per socket and key, shared by shellRun calls (they may run
// at once: each command has its own id). It never keeps the process
// alive while idle, and a connection that ended is replaced on next use.
const shared = new Map();

async function sharedClient(socket, key) {
  const name = JSON.stringify([socket, key ?? null]);
  const held = shared.get(name);
  if (held) {
    const client = await held.catch(() => null);
    if (client && !client.closed) return client;
    if (shared.get(name) === held) shared.delete(name);
  }
  const made = connect({ socket, key, unrefWhenIdle: true });
  shared.set(name, made);
  made.then(
    (client) =>
      client.onClose(() => {
        if (shared.get(name) === made) shared.delete(name);
      }),
    () => {
      if (shared.get(name) === made) shared.delete(name);
    },
  );
  return made;
}

/** Closes the connections shellRun keeps. */
export async function closeShared() {
  const held = [...shared.values()];
  shared.clear();
  await Promise.all(held.map((p) => p.then((c) => c.close(), () => {})));
}

/**
 * One shell command, in the workspace, as shell, in a folder made if
 * missing, returning the exit code and both outputs (UTF-8): the shape of
 * an agent's shell tool. `exitCode` is the shell's convention (128+n after
 * a signal). When warden could not start the command, or a limit ended it,
 * a line saying so ends stderr (and `error`/`limit` say it too).
 */
export async function shellRun(command, options = {}) {
  if (typeof command !== 'string') throw new TypeError('command must be a string');
  const { folder, timeoutMs, env, socket = process.env.WARDEN_SOCKET || DEFAULT_SOCKET, key } = options;
  const client = await sharedClient(socket, key);
  const request = { shell: command };
  if (folder !== undefined && folder !== null) request.folder = folder;
  if (env !== undefined && env !== null) request.env = env;
  if (timeoutMs !== undefined && timeoutMs !== null) request.timeout_ms = timeoutMs;
  const report = await client.run(request);
  let stderr = report.stderr.toString('utf8');
  const note = (line) => {
    stderr += `${stderr === '' || stderr.endsWith('\n') ? '' : '\n'}${line}\n`;
  };
  if (report.error) note(`warden: ${report.error}`);
  if (report.limit) note(`warden: stopped by the ${report.limit} limit${report.signal ? ` (${report.signal})` : ''}`);
  return {
    exitCode: report.status,
    stdout: report.stdout.toString('utf8'),
    stderr,
    signal: report.signal,
    limit: report.limit,
    error: report.error,
    durationMs: report.durationMs,
  };
}
