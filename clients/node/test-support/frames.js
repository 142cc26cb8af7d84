// Frame helpers for the tests, written apart from the client's own reader
// so that a bug in one is not mirrored by the other.

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const KINDS = { 1: 'control', 2: 'stdout', 3: 'stderr', 4: 'stdin' };
export const KIND_NUMBERS = { control: 1, stdout: 2, stderr: 3, stdin: 4 };

const here = path.dirname(fileURLToPath(import.meta.url));
export const FIXTURES = path.resolve(here, '../../fixtures');

/** One frame as bytes. */
export function frameBytes(kind, id, payload) {
  const body = Buffer.isBuffer(payload) ? payload : Buffer.from(payload);
  const header = Buffer.alloc(9);
  header[0] = typeof kind === 'string' ? KIND_NUMBERS[kind] : kind;
  header.writeUInt32BE(id, 1);
  header.writeUInt32BE(body.length, 5);
  return Buffer.concat([header, body]);
}

/** The bytes of a fixture frame. */
export function fixtureFrameBytes(frame) {
  const body = 'json' in frame ? Buffer.from(JSON.stringify(frame.json)) : Buffer.from(frame.base64 ?? '', 'base64');
  return frameBytes(frame.kind, frame.id, body);
}

/**
 * Splits a byte stream into whole frames: push() pieces, take frames with
 * next() (resolves null at the end of the stream).
 */
export class FrameSplitter {
  constructor() {
    this.buffer = Buffer.alloc(0);
    this.frames = [];
    this.waiters = [];
    this.ended = false;
  }

  push(chunk) {
    this.buffer = Buffer.concat([this.buffer, chunk]);
    for (;;) {
      if (this.buffer.length < 9) break;
      const len = this.buffer.readUInt32BE(5);
      if (this.buffer.length < 9 + len) break;
      const frame = {
        kind: KINDS[this.buffer[0]] ?? `kind ${this.buffer[0]}`,
        id: this.buffer.readUInt32BE(1),
        payload: Buffer.from(this.buffer.subarray(9, 9 + len)),
      };
      this.buffer = this.buffer.subarray(9 + len);
      this.deliver(frame);
    }
  }

  deliver(frame) {
    const waiter = this.waiters.shift();
    if (waiter) waiter(frame);
    else this.frames.push(frame);
  }

  end() {
    this.ended = true;
    for (const waiter of this.waiters.splice(0)) waiter(null);
  }

  next() {
    if (this.frames.length) return Promise.resolve(this.frames.shift());
    if (this.ended) return Promise.resolve(null);
    return new Promise((resolve) => this.waiters.push(resolve));
  }
}

/** A frame as a fixture writes it. */
export function fixtureFrame(from, frame) {
  const out = { from, kind: frame.kind, id: frame.id };
  if (frame.kind === 'control') out.json = JSON.parse(frame.payload.toString('utf8'));
  else out.base64 = frame.payload.toString('base64');
  return out;
}

/** Every fixture, parsed, with its file name. */
export function loadFixtures(dir = FIXTURES) {
  return fs
    .readdirSync(dir)
    .filter((name) => name.endsWith('.json'))
    .sort()
    .map((file) => ({ file, ...JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8')) }));
}
