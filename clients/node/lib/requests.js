// The requests as warden takes them, built and checked before they are
// sent, and the exit report in this client's shape.

import { Buffer } from 'node:buffer';
import { toBuffer } from './frames.js';

/** The exit report in this client's shape (absent fields are null). */
export function exitShape(event, stdout, stderr) {
  return {
    status: event.status,
    code: event.code ?? null,
    signal: event.signal ?? null,
    limit: event.limit ?? null,
    error: event.error ?? null,
    durationMs: event.duration_ms,
    stdoutBytes: event.stdout_bytes,
    stderrBytes: event.stderr_bytes,
    drained: event.drained,
    stdout,
    stderr,
  };
}

/** Keys of the run options that this client translates; all others go to warden as they are. */
const RUN_OPTIONS = new Set(['timeout', 'timeoutMs', 'keepBackground', 'stdin']);

/**
 * The run request for `options`: the protocol's own fields (argv, shell,
 * folder, env, timeout_ms, keep_background, limits, and any other, so that
 * warden refuses a typo instead of this client dropping it), plus
 * `timeout`/`timeoutMs` (ms) and `keepBackground`. `pty: {rows, cols}`
 * (version 4) is sent as it is: warden checks the size. Returns the
 * request, what stdin is: null (/dev/null), 'pipe', or bytes to send then
 * close, and the terminal's size asked for (null: none).
 */
export function runRequest(options, streaming) {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new TypeError('run options must be an object');
  }
  const request = { type: 'run' };
  for (const [key, value] of Object.entries(options)) {
    if (RUN_OPTIONS.has(key) || value === undefined) continue;
    if (key === 'type') throw new TypeError('run options may not set "type"');
    request[key] = value;
  }
  const timeout = options.timeout ?? options.timeoutMs;
  if (timeout !== undefined && timeout !== null) {
    if (options.timeout_ms !== undefined) throw new TypeError('give timeout or timeout_ms, not both');
    request.timeout_ms = timeout;
  }
  if (options.keepBackground !== undefined) {
    if (options.keep_background !== undefined) throw new TypeError('give keepBackground or keep_background, not both');
    if (options.keepBackground) request.keep_background = true;
  }
  if (typeof request.env === 'object' && request.env !== null && Object.keys(request.env).length === 0) {
    delete request.env;
  }
  let input = null;
  const stdin = options.stdin;
  if (stdin === undefined || stdin === null) {
    input = null;
  } else if (streaming && stdin === 'pipe') {
    input = 'pipe';
  } else if (streaming && stdin === 'null') {
    input = null;
  } else {
    input = toBuffer(stdin);
  }
  if (input !== null) request.stdin = 'pipe';
  // On a terminal (version 4) stdin is always open: it is what is typed.
  const pty = options.pty ?? null;
  const terminal = pty === null ? null : { rows: pty.rows, cols: pty.cols };
  return { request, input, terminal };
}

/**
 * The run request of a detached command (version 4): `options` as for
 * spawn, plus `tag` (1 to 128 printable bytes, checked by warden), with
 * `"detach": true`. Its stdin can only be 'pipe' (fed later through
 * attach()) or none: nobody is there to write to it on this id.
 */
export function detachRequest(options) {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new TypeError('detach options must be an object');
  }
  const { stdin, tag } = options;
  if (stdin !== undefined && stdin !== null && stdin !== 'pipe' && stdin !== 'null') {
    throw new TypeError('a detached command\'s stdin is "pipe" (written through attach()) or none');
  }
  if (tag !== undefined && tag !== null && typeof tag !== 'string') throw new TypeError('tag must be a string');
  const { request } = runRequest({ ...options, detach: undefined, tag: undefined }, true);
  request.detach = true;
  if (typeof tag === 'string') request.tag = tag;
  return request;
}

/** A detached command's number, as warden names it (detach(), list()): checked before it is sent. */
export function checkCommand(command) {
  if (!Number.isSafeInteger(command) || command < 0) throw new TypeError(`a detached command is warden's number for it (an integer, 0 or more), not ${String(command)}`);
  return command;
}

/** A run's name as warden takes it: 1 to 128 bytes (UTF-8), no control character. */
export function checkRun(run) {
  // eslint-disable-next-line no-control-regex
  if (typeof run !== 'string' || run.length === 0 || Buffer.byteLength(run) > 128 || /[\u0000-\u001f\u007f-\u009f]/.test(run)) {
    throw new TypeError("a run's name is a string of 1 to 128 bytes, no control character");
  }
}
