// A command's output streams (stdout, stderr), read with back-pressure,
// and the promise helpers the client's parts share.

import { Buffer } from 'node:buffer';

export const DEFAULT_HIGH_WATER = 1 << 20;

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
export function quiet(promise) {
  promise.catch(() => {});
  return promise;
}

export function deferred() {
  let resolve;
  let reject;
  const promise = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}
