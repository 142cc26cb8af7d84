// One connection to warden: its frames in and out, the requests on id 0,
// the commands on their own ids, back-pressure on reading; and connect(),
// which makes one and says hello.

import net from 'node:net';
import { Buffer } from 'node:buffer';
import { Attachment, Command, DetachAnswer, WaitAnswer } from './commands.js';
import { ConnectionError, FATAL, REFUSED_IN_PLACE, WardenError } from './errors.js';
import { FrameReader, Kind, MAX_FRAME, encodeHeader, toBuffer } from './frames.js';
import { DEFAULT_HIGH_WATER, deferred } from './output.js';
import { checkCommand, checkRun, detachRequest, runRequest } from './requests.js';

export const VERSION = '0.1.0';
/** The protocol versions this client speaks, offered in every hello. */
export const PROTOCOL_VERSIONS = Object.freeze([1, 2, 3, 4, 5, 6, 7, 8, 9]);
export const DEFAULT_SOCKET = '/run/warden/api.sock';

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
