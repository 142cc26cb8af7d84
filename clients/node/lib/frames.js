// warden's frames: a 9-byte header (kind u8, id u32 big-endian, length
// u32 big-endian) and at most 1 MiB of payload; FrameReader takes them
// from the socket's stream in pieces of any size.

import { Buffer } from 'node:buffer';
import { ConnectionError } from './errors.js';

export const HEADER_LEN = 9;
/** No frame carries more than this, either way. */
export const MAX_FRAME = 1 << 20;
export const Kind = Object.freeze({ CONTROL: 1, STDOUT: 2, STDERR: 3, STDIN: 4 });

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

export function toBuffer(data) {
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
export class FrameReader {
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
