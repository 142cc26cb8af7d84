// A client of warden's API (protocol versions 1 to 9): frames over a unix
// socket, many commands at once on one connection, output streamed with
// back-pressure. No dependencies; Node 18 or later. docs/protocol.md in
// warden's repository is the reference for everything said on the wire.

import net from 'node:net';
import { Buffer } from 'node:buffer';

export const VERSION = '0.1.0';
/** The protocol versions this client speaks, offered in every hello. */
export const PROTOCOL_VERSIONS = Object.freeze([1, 2, 3, 4, 5, 6, 7, 8, 9]);
export const HEADER_LEN = 9;
/** No frame carries more than this, either way. */
export const MAX_FRAME = 1 << 20;
export const DEFAULT_SOCKET = '/run/warden/api.sock';
export const Kind = Object.freeze({ CONTROL: 1, STDOUT: 2, STDERR: 3, STDIN: 4 });

/** Every error code warden sends, in the protocol's own spelling. */
export const ERROR_CODES = Object.freeze([
  'refused',
  'hello_required',
  'unsupported_version',
  'bad_frame',
  'frame_too_large',
  'bad_json',
  'bad_request',
  'duplicate_id',
  'unknown_id',
  'shutting_down',
  'not_confined',
  'audit_failing',
  'gate_closed',
  'internal',
]);

/** The codes after which warden closes the connection. */
const FATAL = new Set(['refused', 'hello_required', 'unsupported_version', 'bad_frame', 'frame_too_large']);
/**
 * Requests whose `refused` answer is not fatal: warden refuses them and
 * keeps the connection (hand_keys on any door but the host's).
 */
const REFUSED_IN_PLACE = new Set(['keys_handed']);

/** What warden answered with an error event: `.code` is the protocol's code. */
export class WardenError extends Error {
  constructor(code, message, { id = 0, fatal = FATAL.has(code) } = {}) {
    super(`warden: ${code}: ${message}`);
    this.name = 'WardenError';
    this.code = code;
    /** warden's own message, unchanged. */
    this.wardenMessage = message;
    /** The frame id the error answered (0: the connection). */
    this.id = id;
    /** Whether warden closes the connection after this error. */
    this.fatal = fatal;
  }

  /** The error of the right subclass for `code` (a WardenError for a code this client does not know). */
  static from(code, message, options) {
    const Class = ERROR_CLASSES[code] ?? WardenError;
    return Class === WardenError ? new WardenError(code, message, options) : new Class(message, options);
  }
}

function errorClass(code, className) {
  const Class = class extends WardenError {
    constructor(message, options) {
      super(code, message, options);
      this.name = className;
    }
  };
  Object.defineProperty(Class, 'name', { value: className });
  return Class;
}

export const RefusedError = errorClass('refused', 'RefusedError');
export const HelloRequiredError = errorClass('hello_required', 'HelloRequiredError');
export const UnsupportedVersionError = errorClass('unsupported_version', 'UnsupportedVersionError');
export const BadFrameError = errorClass('bad_frame', 'BadFrameError');
export const FrameTooLargeError = errorClass('frame_too_large', 'FrameTooLargeError');
export const BadJsonError = errorClass('bad_json', 'BadJsonError');
export const BadRequestError = errorClass('bad_request', 'BadRequestError');
export const DuplicateIdError = errorClass('duplicate_id', 'DuplicateIdError');
export const UnknownIdError = errorClass('unknown_id', 'UnknownIdError');
export const ShuttingDownError = errorClass('shutting_down', 'ShuttingDownError');
export const NotConfinedError = errorClass('not_confined', 'NotConfinedError');
export const AuditFailingError = errorClass('audit_failing', 'AuditFailingError');
export const GateClosedError = errorClass('gate_closed', 'GateClosedError');
export const InternalError = errorClass('internal', 'InternalError');

/** The subclass of WardenError for each code. */
export const ERROR_CLASSES = Object.freeze({
  refused: RefusedError,
  hello_required: HelloRequiredError,
  unsupported_version: UnsupportedVersionError,
  bad_frame: BadFrameError,
  frame_too_large: FrameTooLargeError,
  bad_json: BadJsonError,
  bad_request: BadRequestError,
  duplicate_id: DuplicateIdError,
  unknown_id: UnknownIdError,
  shutting_down: ShuttingDownError,
  not_confined: NotConfinedError,
  audit_failing: AuditFailingError,
  gate_closed: GateClosedError,
  internal: InternalError,
});

/**
 * The connection failed: the socket could not be reached, closed early, or
 * carried something that is not warden's protocol. `.code` is the system's
 * code when there is one (ENOENT, ECONNREFUSED, EACCES, EPIPE...), else
 * 'closed' (the connection ended), 'timeout' (no hello in time) or
 * 'protocol' (warden sent what this client cannot read).
 */
export class ConnectionError extends Error {
  constructor(message, { code = 'closed', cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'ConnectionError';
    this.code = code;
  }
}

/** A frame's 9-byte header. */
export function encodeHeader(kind, id, len) {
  const header = Buffer.allocUnsafe(HEADER_LEN);
  header.writeUInt8(kind, 0);
  header.writeUInt32BE(id, 1);
  header.writeUInt32BE(len, 5);
  return header;
}

/** One whole frame (header and payload) in one buffer. */
export function encodeFrame(kind, id, payload) {
  const body = toBuffer(payload);
  if (body.length > MAX_FRAME) throw new RangeError(`a frame carries at most ${MAX_FRAME} bytes, not ${body.length}`);
  return Buffer.concat([encodeHeader(kind, id, body.length), body]);
}

function toBuffer(data) {
  if (data === undefined || data === null) return Buffer.alloc(0);
  if (Buffer.isBuffer(data)) return data;
  if (typeof data === 'string') return Buffer.from(data, 'utf8');
  if (data instanceof Uint8Array) return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (data instanceof ArrayBuffer) return Buffer.from(data);
  throw new TypeError('bytes must be a string, a Buffer, a Uint8Array or an ArrayBuffer');
}

/**
 * Reads frames from a byte stream in pieces of any size. A control frame's
 * payload is gathered whole (at most 1 MiB); a data frame's payload is
 * handed on in the pieces it arrives in, so output is never gathered here.
 */
class FrameReader {
  constructor({ control, data }) {
    this.onControl = control;
    this.onData = data;
    this.header = Buffer.alloc(HEADER_LEN);
    this.have = 0; // header bytes held
    this.kind = 0;
    this.id = 0;
    this.left = 0; // payload bytes still to come
    this.body = null; // a control frame's payload, being gathered
    this.bodyAt = 0;
    this.inFrame = false;
  }

  /** Takes the next piece of the stream; throws ConnectionError on a frame warden should never send. */
  push(chunk) {
    let at = 0;
    const end = chunk.length;
    while (at < end) {
      if (!this.inFrame) {
        const n = Math.min(HEADER_LEN - this.have, end - at);
        chunk.copy(this.header, this.have, at, at + n);
        this.have += n;
        at += n;
        if (this.have < HEADER_LEN) return;
        this.have = 0;
        this.begin();
        continue;
      }
      const n = Math.min(this.left, end - at);
      if (this.kind === Kind.CONTROL) {
        chunk.copy(this.body, this.bodyAt, at, at + n);
        this.bodyAt += n;
      } else if (n > 0) {
        this.onData(this.kind, this.id, chunk.subarray(at, at + n));
      }
      at += n;
      this.left -= n;
      if (this.left === 0) this.finish();
    }
  }

  begin() {
    const kind = this.header.readUInt8(0);
    const id = this.header.readUInt32BE(1);
    const len = this.header.readUInt32BE(5);
    if (kind !== Kind.CONTROL && kind !== Kind.STDOUT && kind !== Kind.STDERR) {
      throw new ConnectionError(`warden sent a frame of kind ${kind}`, { code: 'protocol' });
    }
    if (len > MAX_FRAME) {
      throw new ConnectionError(`warden sent a frame of ${len} bytes (at most ${MAX_FRAME})`, { code: 'protocol' });
    }
    this.kind = kind;
    this.id = id;
    this.left = len;
    this.inFrame = true;
    if (kind === Kind.CONTROL) {
      this.body = Buffer.allocUnsafe(len);
      this.bodyAt = 0;
    }
    if (len === 0) this.finish();
  }

  finish() {
    this.inFrame = false;
    if (this.kind !== Kind.CONTROL) return;
    const body = this.body;
    this.body = null;
    let event;
    try {
      event = JSON.parse(body.toString('utf8'));
    } catch (e) {
      throw new ConnectionError(`warden sent a control frame that is not JSON: ${e.message}`, { code: 'protocol', cause: e });
    }
    if (event === null || typeof event !== 'object' || Array.isArray(event) || typeof event.type !== 'string') {
      throw new ConnectionError('warden sent a control frame that is not an event', { code: 'protocol' });
    }
    this.onControl(this.id, event);
  }
}

const DEFAULT_HIGH_WATER = 1 << 20;

/**
 * One output stream of a command (stdout or stderr): an async iterable of
 * Buffers, for one reader. It holds at most about `highWaterMark` bytes
 * that nobody has read: past that, the client stops reading its socket
 * (warden then stops the commands of this connection where they write),
 * until the reader catches up. Leaving a `for await` loop early (break)
 * discards the rest of the stream.
 */
export class OutputStream {
  #chunks = [];
  #head = 0;
  #bytes = 0;
  #ended = false;
  #error = null;
  #waiter = null;
  #discarding = false;
  #iterating = false;
  #highWater;
  #onPressure;

  constructor(name, { highWaterMark = DEFAULT_HIGH_WATER, onPressure = () => {} } = {}) {
    this.name = name;
    this.#highWater = highWaterMark;
    this.#onPressure = onPressure;
  }

  /** Bytes received and not yet read. */
  get bufferedBytes() {
    return this.#bytes;
  }

  /** Whether the unread bytes are past the high-water mark. */
  get full() {
    return this.#bytes > this.#highWater;
  }

  get ended() {
    return this.#ended;
  }

  _push(chunk) {
    if (this.#discarding || this.#ended) return;
    const waiter = this.#waiter;
    if (waiter) {
      this.#waiter = null;
      waiter.resolve({ value: chunk, done: false });
      return;
    }
    this.#chunks.push(chunk);
    this.#bytes += chunk.length;
    if (this.full) this.#onPressure(this);
  }

  _end(error = null) {
    if (this.#ended) return;
    this.#ended = true;
    this.#error = error;
    const waiter = this.#waiter;
    if (!waiter) return;
    this.#waiter = null;
    if (error && !this.#discarding) waiter.reject(error);
    else waiter.resolve({ value: undefined, done: true });
  }

  #next() {
    if (this.#head < this.#chunks.length) {
      const chunk = this.#chunks[this.#head];
      this.#chunks[this.#head++] = undefined;
      if (this.#head > 1024 && this.#head * 2 > this.#chunks.length) {
        this.#chunks = this.#chunks.slice(this.#head);
        this.#head = 0;
      }
      const wasFull = this.full;
      this.#bytes -= chunk.length;
      if (wasFull && !this.full) this.#onPressure(this);
      return Promise.resolve({ value: chunk, done: false });
    }
    if (this.#ended || this.#discarding) {
      if (this.#error && !this.#discarding) return Promise.reject(this.#error);
      return Promise.resolve({ value: undefined, done: true });
    }
    if (this.#waiter) return Promise.reject(new Error(`${this.name} is already being read`));
    return new Promise((resolve, reject) => {
      this.#waiter = { resolve, reject };
    });
  }

  /** Drops what is held and whatever else comes. */
  discard() {
    const wasFull = this.full;
    this.#discarding = true;
    this.#chunks = [];
    this.#head = 0;
    this.#bytes = 0;
    if (wasFull) this.#onPressure(this);
    const waiter = this.#waiter;
    if (waiter) {
      this.#waiter = null;
      waiter.resolve({ value: undefined, done: true });
    }
  }

  [Symbol.asyncIterator]() {
    if (this.#iterating) throw new Error(`${this.name} has one reader, and it has one already`);
    this.#iterating = true;
    return {
      next: () => this.#next(),
      return: () => {
        this.discard();
        return Promise.resolve({ value: undefined, done: true });
      },
      [Symbol.asyncIterator]() {
        return this;
      },
    };
  }

  /** Reads the whole rest of the stream into one Buffer (for small outputs). */
  async bytes() {
    const parts = [];
    for await (const chunk of this) parts.push(chunk);
    return Buffer.concat(parts);
  }

  /** Reads the whole rest of the stream as UTF-8 text. */
  async text() {
    return (await this.bytes()).toString('utf8');
  }
}

// Promises a caller may never look at must not end the process as
// unhandled rejections; the caller who awaits them still sees the error.
function quiet(promise) {
  promise.catch(() => {});
  return promise;
}

function deferred() {
  let resolve;
  let reject;
  const promise = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** The exit report in this client's shape (absent fields are null). */
function exitShape(event, stdout, stderr) {
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
function runRequest(options, streaming) {
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
function detachRequest(options) {
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
function checkCommand(command) {
  if (!Number.isSafeInteger(command) || command < 0) throw new TypeError(`a detached command is warden's number for it (an integer, 0 or more), not ${String(command)}`);
  return command;
}

/**
 * A command running through warden, as `client.spawn` returns it.
 * `stdout` and `stderr` are async iterables of Buffers; `started` resolves
 * to {command, pid} (or null when the command could not start, in which
 * case `exit` carries the error); `exit` resolves to the exit report.
 * Both reject with a WardenError if warden refused the run.
 */
export class Command {
  #client;
  #pipe;
  #stdinOpen;
  #chain = Promise.resolve();
  #started = deferred();
  #exit = deferred();
  #settled = false;
  #startedSettled = false;

  constructor(client, id, { stdinMode, terminal = null, highWaterMark, collect, onPressure }) {
    this.#client = client;
    this.id = id;
    this.#pipe = stdinMode === 'pipe' || terminal !== null;
    this.#stdinOpen = this.#pipe;
    /**
     * The command's terminal size, {rows, cols}, when it runs on one (pty,
     * version 4), as last asked for; null otherwise.
     */
    this.terminal = terminal;
    /** Errors warden reported about this command's stdin (unknown_id), which do not end it. */
    this.stdinErrors = [];
    this.command = null;
    this.pid = null;
    this.result = null;
    const options = { highWaterMark, onPressure };
    this.stdout = collect ? null : new OutputStream('stdout', options);
    this.stderr = collect ? null : new OutputStream('stderr', options);
    this._collected = collect ? { stdout: [], stderr: [] } : null;
    this.started = quiet(this.#started.promise);
    this.exit = quiet(this.#exit.promise);
  }

  /** Whether stdin frames may still be written. */
  get stdinOpen() {
    return this.#stdinOpen && !this.#settled;
  }

  get done() {
    return this.#settled;
  }

  /**
   * Writes bytes to the command's stdin (stdin 'pipe', or a terminal: then
   * they are typed, raw, and '\x03' is Ctrl-C), in frames of at most 1 MiB;
   * resolves once the socket can take more.
   */
  write(data) {
    const bytes = toBuffer(data);
    if (!this.#pipe) return Promise.reject(new TypeError('this command was not spawned with stdin "pipe" or a pty'));
    if (!this.#stdinOpen) return Promise.reject(new Error('stdin is closed'));
    if (bytes.length === 0) return this.#chain;
    const work = this.#chain.then(async () => {
      for (let at = 0; at < bytes.length; at += MAX_FRAME) {
        if (this.#settled) return;
        await this.#client._frame(Kind.STDIN, this.id, bytes.subarray(at, at + MAX_FRAME));
      }
    });
    this.#chain = work.catch(() => {});
    return quiet(work);
  }

  /** Closes the command's stdin (an empty stdin frame), after every pending write. */
  end() {
    if (!this.#pipe || !this.#stdinOpen) return this.#chain;
    this.#stdinOpen = false;
    const work = this.#chain.then(() => {
      if (!this.#settled) return this.#client._frame(Kind.STDIN, this.id, Buffer.alloc(0));
    });
    this.#chain = work.catch(() => {});
    return quiet(work);
  }

  /**
   * Signals the command's whole process group ('TERM', 'SIGTERM' or '15'),
   * once it has started; resolves to warden's `signalled` event, rejects
   * with an UnknownIdError when the command is not running.
   */
  kill(signal = 'TERM') {
    const send = () => this.#client._request({ type: 'signal', target: this.id, signal: String(signal) }, 'signalled');
    // warden signals only a command it has started: a kill right after
    // spawn waits for the started event (or the end) first.
    if (this.pid !== null || this.#settled) return quiet(send());
    return quiet(Promise.race([this.started, this.exit]).then(send));
  }

  /**
   * Resizes the command's terminal (version 4; the command's foreground
   * job gets SIGWINCH), once it has started; resolves to warden's
   * `resized` event. Rejects with an UnknownIdError when the command runs
   * on no terminal (or is no longer running), a BadRequestError for a
   * size warden refuses (each side 1 to 1000).
   */
  resize(rows, cols) {
    if (!Number.isSafeInteger(rows) || !Number.isSafeInteger(cols)) {
      return Promise.reject(new TypeError('rows and cols are integers'));
    }
    const send = async () => {
      const event = await this.#client._request({ type: 'resize', target: this.id, rows, cols }, 'resized');
      if (this.terminal !== null) this.terminal = { rows: event.rows, cols: event.cols };
      return event;
    };
    // As for kill(): warden resizes only a command it has started.
    if (this.pid !== null || this.#settled) return quiet(send());
    return quiet(Promise.race([this.started, this.exit]).then(send));
  }

  _onStarted(event) {
    this.command = event.command;
    this.pid = event.pid;
    this.#startedSettled = true;
    this.#started.resolve({ command: event.command, pid: event.pid });
  }

  /** Another event on this id (of a later version): true when it ends the id's use. */
  _onEvent() {
    return false;
  }

  /** An error that does not end the command: unknown_id, about stdin frames that came too late. */
  _lateError(error) {
    if (error.code !== 'unknown_id') return false;
    this.stdinErrors.push(error);
    return true;
  }

  _onData(kind, chunk) {
    if (this.#settled) return;
    if (this._collected) {
      // Small pieces are copied, so that they do not hold on to the socket's whole read buffer.
      const piece = chunk.length < 16384 ? Buffer.from(chunk) : chunk;
      (kind === Kind.STDOUT ? this._collected.stdout : this._collected.stderr).push(piece);
    } else {
      (kind === Kind.STDOUT ? this.stdout : this.stderr)._push(chunk);
    }
  }

  _onExit(event) {
    if (this.#settled) return;
    this.#settled = true;
    this.#stdinOpen = false;
    if (!this.#startedSettled) {
      this.#startedSettled = true;
      this.#started.resolve(null);
    }
    let stdout = null;
    let stderr = null;
    if (this._collected) {
      stdout = Buffer.concat(this._collected.stdout);
      stderr = Buffer.concat(this._collected.stderr);
      this._collected = null;
    } else {
      this.stdout._end();
      this.stderr._end();
    }
    this.result = exitShape(event, stdout, stderr);
    this.result.command = this.command;
    this.result.pid = this.pid;
    this.#exit.resolve(this.result);
  }

  _onFail(error) {
    if (this.#settled) return;
    this.#settled = true;
    this.#stdinOpen = false;
    if (!this.#startedSettled) {
      this.#startedSettled = true;
      this.#started.reject(error);
    }
    if (!this._collected) {
      this.stdout._end(error);
      this.stderr._end(error);
    }
    this._collected = null;
    this.#exit.reject(error);
  }
}

/**
 * A detached command (version 4) followed on a frame id of this
 * connection, as `client.attach` returns it: what it printed while nobody
 * was attached (the last 1 MiB), then its output live, then its exit.
 * `stdout` and `stderr` are async iterables of Buffers as for spawn;
 * `attached` resolves to {command, droppedBytes} (the bytes let go before
 * anyone attached) or rejects with an UnknownIdError when warden has no
 * such command; `exit` resolves to its exit report. write() and end()
 * reach its stdin when it was started with stdin 'pipe' or a pty (end()
 * closes it, for every attachment); otherwise warden answers with
 * unknown_id errors, kept in `stdinErrors`. Closing the connection only
 * stops following it: the command runs on.
 */
export class Attachment extends Command {
  #client;
  #attached = deferred();

  constructor(client, id, command, { highWaterMark, onPressure }) {
    // Whether it takes stdin is warden's to say: write() is let through.
    super(client, id, { stdinMode: 'pipe', terminal: null, highWaterMark, collect: false, onPressure });
    this.#client = client;
    /** warden's number for the command (as detach() and list() give it). */
    this.command = command;
    /** Output let go before this attachment (null until warden's `attached`). */
    this.droppedBytes = null;
    this.attached = quiet(this.#attached.promise);
  }

  _onEvent(event) {
    if (event.type !== 'attached') return false;
    this.droppedBytes = Number(event.dropped_bytes ?? 0);
    this._onStarted({ command: this.command, pid: null });
    this.#attached.resolve({ command: this.command, droppedBytes: this.droppedBytes });
    return false;
  }

  // Before `attached`, unknown_id means warden has no such command: the
  // attachment is refused. After it, it is about stdin (none open).
  _lateError(error) {
    return this.droppedBytes !== null && super._lateError(error);
  }

  _onExit(event) {
    super._onExit(event);
    this.#attached.resolve({ command: this.command, droppedBytes: this.droppedBytes ?? 0 });
  }

  _onFail(error) {
    super._onFail(error);
    this.#attached.reject(error);
  }

  /**
   * Signals the detached command's whole process group (as
   * client.signalCommand); resolves to {type: 'command_signalled',
   * command, signal}, rejects with an UnknownIdError once it has ended.
   */
  kill(signal = 'TERM') {
    return quiet(this.#client.signalCommand(this.command, signal));
  }

  /**
   * Resizes the command's terminal (it was detached with a pty), once
   * attached; resolves to warden's `resized` event and keeps the size in
   * `terminal`. UnknownIdError when it runs on no terminal or has ended.
   */
  resize(rows, cols) {
    return quiet(
      super.resize(rows, cols).then((event) => {
        this.terminal = { rows: event.rows, cols: event.cols };
        return event;
      }),
    );
  }
}

/** The answer to a detached run, on its id: `detached`, or the exit of a command that could not start. */
class DetachAnswer {
  #answer = deferred();

  constructor(tag) {
    this.tag = tag;
    this.promise = this.#answer.promise;
  }

  _onStarted() {}

  _onData() {}

  _onEvent(event) {
    if (event.type !== 'detached') return false;
    this.#answer.resolve({ command: event.command, pid: event.pid, tag: event.tag ?? null, exit: null });
    return true;
  }

  _lateError() {
    return false;
  }

  _onExit(event) {
    const exit = { ...exitShape(event, null, null), command: null, pid: null };
    this.#answer.resolve({ command: null, pid: null, tag: this.tag, exit });
  }

  _onFail(error) {
    this.#answer.reject(error);
  }
}

/** The answer to a wait, on its id: the detached command's exit. */
class WaitAnswer {
  #answer = deferred();

  constructor(command) {
    this.command = command;
    this.promise = this.#answer.promise;
  }

  _onStarted() {}

  _onData() {}

  _onEvent() {
    return false;
  }

  _lateError() {
    return false;
  }

  _onExit(event) {
    this.#answer.resolve({ ...exitShape(event, null, null), command: this.command, pid: null });
  }

  _onFail(error) {
    this.#answer.reject(error);
  }
}

/**
 * One connection to warden, after the hello. Create it with `connect`.
 * Commands take distinct non-zero frame ids, never reused on a connection;
 * every other request goes on id 0 and is answered in the order sent.
 */
export class Client {
  #socket;
  #reader;
  #commands = new Map();
  #pending = []; // requests on id 0, oldest first: {expect, resolve, reject}
  #nextId = 1;
  #failure = null;
  #closing = false;
  #drain = null;
  #full = new Set();
  #paused = false;
  #unrefWhenIdle = false;
  #highWaterMark;
  #closeListeners = [];

  /** @internal use connect() */
  constructor(socket, options = {}) {
    this.#socket = socket;
    this.#highWaterMark = options.highWaterMark ?? DEFAULT_HIGH_WATER;
    this.#unrefWhenIdle = Boolean(options.unrefWhenIdle);
    /** The protocol version agreed in the hello. */
    this.version = 0;
    /** warden's name and version, from its hello. */
    this.server = '';
    this.#reader = new FrameReader({
      control: (id, event) => this.#event(id, event),
      data: (kind, id, chunk) => this.#commands.get(id)?._onData(kind, chunk),
    });
    socket.on('data', (chunk) => {
      try {
        this.#reader.push(chunk);
      } catch (error) {
        this.#fail(error instanceof ConnectionError ? error : new ConnectionError(String(error), { code: 'protocol', cause: error }));
      }
    });
    socket.on('error', (error) => {
      this.#fail(new ConnectionError(`warden's socket: ${error.message}`, { code: error.code ?? 'closed', cause: error }));
    });
    socket.on('close', () => {
      this.#fail(new ConnectionError(this.#closing ? 'the connection was closed' : 'warden closed the connection', { code: 'closed' }));
    });
    socket.on('drain', () => {
      const drain = this.#drain;
      this.#drain = null;
      drain?.resolve();
    });
  }

  /** Whether the connection has ended (by close() or otherwise). */
  get closed() {
    return this.#failure !== null;
  }

  /** Commands running on this connection now (attachments and waits included). */
  get running() {
    return this.#commands.size;
  }

  /** Calls `listener(error)` once the connection has ended. */
  onClose(listener) {
    if (this.#failure) queueMicrotask(() => listener(this.#failure));
    else this.#closeListeners.push(listener);
  }

  /** Resolves with the hello event, or rejects with the reason there is none. */
  _hello(hello, timeoutMs) {
    const answer = this._request(hello, 'hello', { counted: false });
    if (!(timeoutMs > 0)) return answer;
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => {
        const error = new ConnectionError(`warden did not answer the hello within ${timeoutMs} ms`, { code: 'timeout' });
        this.#fail(error);
        reject(error);
      }, timeoutMs);
    });
    return Promise.race([answer, timeout]).finally(() => clearTimeout(timer));
  }

  #event(id, event) {
    if (id === 0) {
      // A refusal of the request it answers (hand_keys on the machine's
      // own socket) leaves the connection open; any other is its end.
      const inPlace = event.code === 'refused' && REFUSED_IN_PLACE.has(this.#pending[0]?.expect);
      if (event.type === 'error' && FATAL.has(event.code) && !inPlace) {
        // The connection's end (warden closes it next); every waiter learns why.
        this.#fail(WardenError.from(String(event.code), String(event.message ?? ''), { id: 0 }));
        return;
      }
      const waiter = this.#pending.shift();
      if (!waiter) return; // nothing asked: an event of a later version, ignored
      this.#idleCheck();
      if (event.type === 'error') {
        waiter.reject(WardenError.from(String(event.code), String(event.message ?? ''), { id: 0, fatal: false }));
      } else if (waiter.expect === event.type) {
        waiter.resolve(event);
      } else {
        waiter.reject(new ConnectionError(`warden answered ${JSON.stringify(event.type)} where ${JSON.stringify(waiter.expect)} was due`, { code: 'protocol' }));
      }
      return;
    }
    const command = this.#commands.get(id);
    if (!command) return; // a command already ended or refused: e.g. stdin that raced its exit
    switch (event.type) {
      case 'started':
        command._onStarted(event);
        break;
      case 'exit':
        this.#commands.delete(id);
        this.#release(command);
        command._onExit(event);
        this.#idleCheck();
        break;
      case 'error': {
        const error = WardenError.from(String(event.code), String(event.message ?? ''), { id });
        // unknown_id about stdin frames that came too late (warden answers
        // them on the command's id): the command goes on to its exit.
        if (command._lateError(error)) break;
        this.#commands.delete(id);
        this.#release(command);
        command._onFail(error);
        this.#idleCheck();
        break;
      }
      default:
        // detached and attached (version 4); an event of a later version is ignored.
        if (command._onEvent(event)) {
          this.#commands.delete(id);
          this.#release(command);
          this.#idleCheck();
        }
        break;
    }
  }

  #fail(error) {
    if (this.#failure) return;
    this.#failure = error;
    this.#socket.destroy();
    const pending = this.#pending;
    this.#pending = [];
    for (const waiter of pending) waiter.reject(error);
    const commands = [...this.#commands.values()];
    this.#commands.clear();
    for (const command of commands) command._onFail(error);
    this.#drain?.reject(error);
    this.#drain = null;
    for (const listener of this.#closeListeners.splice(0)) {
      try {
        listener(error);
      } catch {
        // a listener's failure is its own
      }
    }
  }

  #idleCheck() {
    if (!this.#unrefWhenIdle || this.#failure) return;
    if (this.#pending.length === 0 && this.#commands.size === 0) this.#socket.unref();
    else this.#socket.ref();
  }

  // Back-pressure on reading: the socket is paused while any stream
  // holds more unread bytes than its high-water mark.
  #pressure(stream) {
    if (stream.full) this.#full.add(stream);
    else this.#full.delete(stream);
    this.#flow();
  }

  #release(command) {
    if (command.stdout) this.#full.delete(command.stdout);
    if (command.stderr) this.#full.delete(command.stderr);
    this.#flow();
  }

  #flow() {
    if (this.#failure) return;
    const pause = this.#full.size > 0;
    if (pause && !this.#paused) {
      this.#paused = true;
      this.#socket.pause();
    } else if (!pause && this.#paused) {
      this.#paused = false;
      this.#socket.resume();
    }
  }

  /** Writes one frame; resolves once the socket can take more. */
  _frame(kind, id, payload) {
    if (this.#failure) return Promise.reject(this.#failure);
    const body = toBuffer(payload);
    if (body.length > MAX_FRAME) return Promise.reject(new RangeError(`a frame carries at most ${MAX_FRAME} bytes`));
    const header = encodeHeader(kind, id, body.length);
    let ok;
    if (body.length <= 64 * 1024) {
      ok = this.#socket.write(body.length ? Buffer.concat([header, body]) : header);
    } else {
      this.#socket.cork();
      this.#socket.write(header);
      ok = this.#socket.write(body);
      this.#socket.uncork();
    }
    if (ok) return Promise.resolve();
    if (!this.#drain) this.#drain = deferred();
    return this.#drain.promise;
  }

  /** Sends a request on id 0 and resolves with its answer of type `expect`. */
  _request(request, expect, { counted = true } = {}) {
    if (this.#failure) return Promise.reject(this.#failure);
    const waiter = deferred();
    this.#pending.push({ expect, resolve: waiter.resolve, reject: waiter.reject });
    if (counted) this.#idleCheck();
    this._frame(Kind.CONTROL, 0, Buffer.from(JSON.stringify(request), 'utf8')).catch(() => {});
    return waiter.promise;
  }

  #allocateId() {
    for (let tries = 0; tries < 1000; tries++) {
      const id = this.#nextId;
      this.#nextId = id >= 0xffffffff ? 1 : id + 1;
      if (!this.#commands.has(id)) return id;
    }
    throw new Error('no free command id');
  }

  /** Sends `request` on a new frame id (or `id`), whose frames go to `handler` until it is done. */
  #send(handler, request, id = this.#allocateId()) {
    this.#commands.set(id, handler);
    this.#idleCheck();
    this._frame(Kind.CONTROL, id, Buffer.from(JSON.stringify(request), 'utf8')).catch(() => {});
    return id;
  }

  #start(options, { streaming, highWaterMark }) {
    if (this.#failure) throw this.#failure;
    const { request, input, terminal } = runRequest(options, streaming);
    const id = this.#allocateId();
    const command = new Command(this, id, {
      stdinMode: input === null ? null : 'pipe',
      terminal,
      highWaterMark: highWaterMark ?? this.#highWaterMark,
      collect: !streaming,
      onPressure: (stream) => this.#pressure(stream),
    });
    this.#commands.set(id, command);
    this.#idleCheck();
    this._frame(Kind.CONTROL, id, Buffer.from(JSON.stringify(request), 'utf8')).catch(() => {});
    if (input !== null && input !== 'pipe') {
      command.write(input).catch(() => {});
      command.end().catch(() => {});
    }
    return command;
  }

  /**
   * Starts a command and streams it: see Command. `options` as for run;
   * `stdin: 'pipe'` lets you write() and end() its input (other strings
   * and bytes are written, then stdin is closed). With `pty: {rows, cols}`
   * (version 4) it runs on a terminal: its output is all on stdout,
   * write() types into it (stdin is open without 'pipe') and resize()
   * changes its size. `highWaterMark` (bytes, default 1 MiB) bounds what
   * each unread stream holds.
   */
  spawn(options, { highWaterMark } = {}) {
    if (options?.detach === true) throw new TypeError('a detached command is started with detach() and followed with attach()');
    return this.#start(options, { streaming: true, highWaterMark });
  }

  /**
   * Runs a command to its end and collects its output. Options: argv or
   * shell, folder, env, timeout (ms), stdin (string or bytes: sent, then
   * closed), limits, keepBackground, pty ({rows, cols}, version 4: on a
   * terminal, everything it prints in stdout), and any other protocol
   * field. With `detach: true` (version 4) it is detach(options).
   */
  async run(options) {
    if (options?.detach === true) return this.detach(options);
    const command = this.#start(options, { streaming: false });
    return command.exit;
  }

  /**
   * Starts a detached command (version 4): it runs on whoever is connected,
   * this connection's end included. Options as for spawn, plus `tag` (1 to
   * 128 printable bytes: its name in list()); `stdin: 'pipe'` lets
   * attachments write to it (a pty always does). Resolves to {command,
   * pid, tag, exit: null}, or, when it could not start, {command: null,
   * pid: null, tag, exit} with the exit report saying why; rejects with a
   * WardenError when warden refuses the run (BadRequestError for a bad tag,
   * or when 64 detached commands run already).
   */
  async detach(options) {
    if (this.#failure) throw this.#failure;
    const request = detachRequest(options);
    const answer = new DetachAnswer(request.tag ?? null);
    this.#send(answer, request);
    return answer.promise;
  }

  /**
   * Follows a detached command (version 4) on a new frame id: see
   * Attachment. `highWaterMark` as for spawn.
   */
  attach(command, { highWaterMark } = {}) {
    if (this.#failure) throw this.#failure;
    checkCommand(command);
    const attachment = new Attachment(this, this.#allocateId(), command, {
      highWaterMark: highWaterMark ?? this.#highWaterMark,
      onPressure: (stream) => this.#pressure(stream),
    });
    this.#send(attachment, { type: 'attach', command }, attachment.id);
    return attachment;
  }

  /**
   * Resolves to a detached command's exit report once it has ended (at
   * once if it has; version 4), with `stdout` and `stderr` null (attach()
   * to read its output). Rejects with an UnknownIdError when warden has
   * no such command (any more: it keeps the last 64 that ended).
   */
  async wait(command) {
    if (this.#failure) throw this.#failure;
    const answer = new WaitAnswer(checkCommand(command));
    this.#send(answer, { type: 'wait', command });
    return answer.promise;
  }

  /**
   * The detached commands (version 4), running or lately ended, in
   * warden's shape: [{command, tag?, argv, folder?, pid, started_ms,
   * state: 'running' | 'exited', exit?, attached, dropped_bytes}].
   */
  async list() {
    const event = await this._request({ type: 'list' }, 'commands');
    return Array.isArray(event.commands) ? event.commands : [];
  }

  /**
   * Signals a detached command's whole process group (version 4; 'TERM',
   * 'SIGTERM' or '15'); resolves to {type: 'command_signalled', command,
   * signal}, rejects with an UnknownIdError when it is not running.
   */
  async signalCommand(command, signal = 'TERM') {
    checkCommand(command);
    return this._request({ type: 'signal_command', command, signal: String(signal) }, 'command_signalled');
  }

  /** warden's status event (version 3 adds shell_processes and gate, version 4 activity). */
  status() {
    return this._request({ type: 'status' }, 'status');
  }

  /** Has warden read network.json again; resolves to the `reloaded` event. */
  reload() {
    return this._request({ type: 'reload' }, 'reloaded');
  }

  /** Appends a runtime event to the audit log; resolves to {type:'recorded', seq}. */
  audit(kind, fields) {
    const request = { type: 'audit', kind };
    if (fields !== undefined) request.fields = fields;
    return this._request(request, 'recorded');
  }

  /** Signals every process of shell (version 3); resolves to {type:'shell_stopped', signalled, left}. */
  stopShell(signal = 'KILL') {
    return this._request({ type: 'stop_shell', signal: String(signal) }, 'shell_stopped');
  }

  /** Closes the runtime's gate (version 3): every shell command is refused with `reason` until openGate(). */
  closeGate(reason) {
    return this._request({ type: 'close_gate', reason: String(reason) }, 'gate');
  }

  /** Opens the runtime's gate again (version 3); resolves to {type:'gate', closed:false, since_ms}. */
  openGate() {
    return this._request({ type: 'open_gate' }, 'gate');
  }

  /**
   * Keeps the machine awake until `untilMs` (Unix time in milliseconds;
   * version 4), whatever its idle stop says; a time past, or 0, lets go.
   * Resolves to the hold now in force (Unix ms; 0: none). More than a week
   * ahead is a BadRequestError.
   */
  async hold(untilMs) {
    if (!Number.isSafeInteger(untilMs) || untilMs < 0) throw new TypeError('untilMs is a time in Unix milliseconds: an integer, 0 or more');
    const event = await this._request({ type: 'hold', until_ms: untilMs }, 'held');
    return event.until_ms;
  }

  /**
   * Says the machine is ready (version 9, the runtime's): `warden machine
   * up` and `--start` return once it is, where the definition says
   * `"ready": "runtime"`. Resolves to since when, in ms after warden started
   * (said again, the first time stands).
   */
  async ready() {
    const event = await this._request({ type: 'ready' }, 'ready_noted');
    return event.after_ms;
  }

  /**
   * Says when the runtime's next job is due (version 9; Unix ms, 0: none):
   * the machine does not stop for being idle within five minutes of it,
   * and `warden machine serve` starts it ahead of it. Resolves to it.
   */
  async nextJob(atMs) {
    if (!Number.isSafeInteger(atMs) || atMs < 0) throw new TypeError('atMs is a time in Unix milliseconds: an integer, 0 or more');
    const event = await this._request({ type: 'next_job', at_ms: atMs }, 'next_job_at');
    return event.at_ms;
  }

  /**
   * Hands the runtime its keys (version 4, the host's door only): `text` is
   * a .env text (NAME=VALUE lines), written as the runtime's .env and given
   * to the main process. Resolves to the keys' names; on the machine's own
   * socket it is refused (a RefusedError that leaves the connection open).
   */
  async handKeys(text) {
    if (typeof text !== 'string') throw new TypeError('text is a .env text: a string');
    const event = await this._request({ type: 'hand_keys', text }, 'keys_handed');
    return event.names;
  }

  /**
   * Opens a run (version 8): the machine's requests to its model providers
   * count against its budget, in dollars (left out: the machine's
   * spend.per_run_usd), until endRun(run). Resolves to the budget in
   * integer micro-dollars; a name already open is a BadRequestError.
   */
  async beginRun(run, budgetUsd) {
    checkRun(run);
    const request = { type: 'begin_run', run };
    if (budgetUsd !== undefined && budgetUsd !== null) {
      if (typeof budgetUsd !== 'number' || !Number.isFinite(budgetUsd) || budgetUsd < 0) {
        throw new TypeError('budgetUsd is dollars: a finite number, 0 or more');
      }
      request.budget_usd = budgetUsd;
    }
    const event = await this._request(request, 'run_begun');
    return event.budget_micro_usd;
  }

  /**
   * Ends a run (version 8); resolves to {type:'run_ended', run,
   * spent_micro_usd, how} (how: 'ended', or 'budget' when it reached its
   * budget first).
   */
  endRun(run) {
    checkRun(run);
    return this._request({ type: 'end_run', run }, 'run_ended');
  }

  /**
   * A run's card (version 8), built by warden from its audit log: {run,
   * began, ended (null while open), how, budget_micro_usd,
   * spent_micro_usd, models, requests, commands, hosts}. An unknown run is
   * a BadRequestError.
   */
  async card(run) {
    checkRun(run);
    const event = await this._request({ type: 'card', run }, 'card');
    return event.card;
  }

  /** Stops the machine (version 2); resolves to {type:'shutting_down'}, or when warden closes the connection first. */
  async shutdown() {
    try {
      return await this._request({ type: 'shutdown' }, 'shutting_down');
    } catch (error) {
      if (error instanceof ConnectionError && error.code === 'closed' && !this.#closing) return { type: 'shutting_down' };
      throw error;
    }
  }

  /**
   * Closes the connection. warden kills every command still running on it
   * (detached ones run on: their attachments only stop following them).
   * Resolves once the socket is closed (at most `timeoutMs` later).
   */
  close({ timeoutMs = 2000 } = {}) {
    if (this.#failure) return Promise.resolve();
    this.#closing = true;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#fail(new ConnectionError('the connection was closed', { code: 'closed' }));
        resolve();
      }, timeoutMs);
      this.onClose(() => {
        clearTimeout(timer);
        resolve();
      });
      // warden keeps its side open while a detached command this
      // connection started or follows runs on: once the end is sent, and
      // nothing pending is one warden answers at a connection's end (a
      // request, a command it kills), there is nothing to wait for.
      this.#socket.end(() => {
        if (this.#pending.length === 0 && [...this.#commands.values()].every((c) => !(c instanceof Command) || c instanceof Attachment)) {
          this.#socket.destroy();
        }
      });
    });
  }
}

/** A run's name as warden takes it: 1 to 128 bytes (UTF-8), no control character. */
function checkRun(run) {
  // eslint-disable-next-line no-control-regex
  if (typeof run !== 'string' || run.length === 0 || Buffer.byteLength(run) > 128 || /[\u0000-\u001f\u007f-\u009f]/.test(run)) {
    throw new TypeError("a run's name is a string of 1 to 128 bytes, no control character");
  }
}

/**
 * Connects to warden's socket and says hello. Options: `socket` (default
 * $WARDEN_SOCKET, else /run/warden/api.sock), `key` (the machine's key, for
 * its host socket), `timeoutMs` (for the connection and the hello, default
 * 30000), `highWaterMark` (see spawn).
 */
export async function connect(options = {}) {
  const {
    socket: path = process.env.WARDEN_SOCKET || DEFAULT_SOCKET,
    key,
    timeoutMs = 30000,
    highWaterMark,
    clientName = `warden-node ${VERSION}`,
    unrefWhenIdle = false,
  } = options;
  if (key !== undefined && key !== null && typeof key !== 'string') throw new TypeError('key must be a string');
  const socket = await new Promise((resolve, reject) => {
    const s = net.createConnection({ path });
    const onError = (error) => {
      s.destroy();
      reject(new ConnectionError(`cannot connect to ${path}: ${error.message}`, { code: error.code ?? 'closed', cause: error }));
    };
    s.once('error', onError);
    s.once('connect', () => {
      s.off('error', onError);
      resolve(s);
    });
  });
  const client = new Client(socket, { highWaterMark, unrefWhenIdle });
  const hello = { type: 'hello', versions: [...PROTOCOL_VERSIONS], client: clientName };
  if (typeof key === 'string') hello.key = key;
  let answer;
  try {
    answer = await client._hello(hello, timeoutMs);
  } catch (error) {
    socket.destroy();
    throw error;
  }
  if (!PROTOCOL_VERSIONS.includes(answer.version)) {
    await client.close();
    throw new ConnectionError(`warden chose version ${answer.version}, which was not offered`, { code: 'protocol' });
  }
  client.version = answer.version;
  client.server = String(answer.server ?? '');
  if (unrefWhenIdle && client.running === 0) socket.unref();
  return client;
}

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
