// What runs on a frame id of its own: a command (spawn, run), an
// attachment to a detached command, and the answers to a detached run and
// to a wait.

import { Buffer } from 'node:buffer';
import { Kind, MAX_FRAME, toBuffer } from './frames.js';
import { OutputStream, deferred, quiet } from './output.js';
import { exitShape } from './requests.js';

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
export class DetachAnswer {
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
export class WaitAnswer {
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
