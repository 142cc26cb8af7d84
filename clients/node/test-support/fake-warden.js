// Fake wardens on unix sockets: one that replays a fixture, and one that
// a test scripts frame by frame.

import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { FrameSplitter, fixtureFrameBytes, frameBytes } from './frames.js';

const FATAL = new Set(['refused', 'hello_required', 'unsupported_version', 'bad_frame', 'frame_too_large']);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function socketPath() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warden-fake.'));
  return { dir, path: path.join(dir, 'api.sock') };
}

/** Within `ms`, or rejects saying what was awaited. */
function within(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** Whether a recorded client frame and a received one are the same (hello's client, and key unless recorded, ignored). */
export function sameClientFrame(recorded, got) {
  if (recorded.kind !== got.kind || recorded.id !== got.id) return false;
  if ('json' in recorded) {
    let json;
    try {
      json = JSON.parse(got.payload.toString('utf8'));
    } catch {
      return false;
    }
    const want = { ...recorded.json };
    if (want.type === 'hello' && json && typeof json === 'object') {
      json = { ...json };
      delete json.client;
      delete want.client;
      if (!('key' in want)) delete json.key;
      // A newer client offers the recorded versions and newer ones (a
      // warden that answers the recorded one speaks it).
      const [offered, recorded] = [json.versions, want.versions];
      if (Array.isArray(offered) && Array.isArray(recorded) && recorded.every((v, i) => offered[i] === v)) {
        json.versions = recorded;
      }
    }
    return isDeepStrictEqual(json, want);
  }
  return got.payload.equals(Buffer.from(recorded.base64 ?? '', 'base64'));
}

function describe(frame) {
  if (frame.kind === 'control') return `${frame.kind} id ${frame.id} ${frame.payload.toString('utf8')}`;
  return `${frame.kind} id ${frame.id} (${frame.payload.length} bytes) ${frame.payload.toString('base64').slice(0, 80)}`;
}

/**
 * Replays `fixture` to the first client that connects: reads each client
 * frame and compares it, writes each warden frame (in small pieces with
 * `pieces`, so the client sees partial reads), closes after a fatal
 * error, and otherwise waits for the client to close. `done` resolves to
 * {problems: [...]}.
 */
export async function replayWarden(fixture, { pieces = false, timeoutMs = 10000 } = {}) {
  const where = socketPath();
  const problems = [];
  let finish;
  const done = new Promise((resolve) => {
    finish = resolve;
  });
  const server = net.createServer(async (socket) => {
    server.close();
    const splitter = new FrameSplitter();
    socket.on('data', (chunk) => splitter.push(chunk));
    socket.on('end', () => splitter.end());
    socket.on('close', () => splitter.end());
    socket.on('error', () => splitter.end());
    try {
      let fatal = false;
      for (const [i, frame] of fixture.frames.entries()) {
        if (frame.from === 'client') {
          const got = await within(splitter.next(), timeoutMs, `client frame ${i} (${frame.kind} id ${frame.id})`);
          if (got === null) {
            problems.push(`frame ${i}: the client closed instead of sending ${JSON.stringify(frame)}`);
            break;
          }
          if (!sameClientFrame(frame, got)) {
            problems.push(`frame ${i}: expected ${JSON.stringify(frame)}, got ${describe(got)}`);
            break;
          }
        } else {
          const bytes = fixtureFrameBytes(frame);
          if (pieces) {
            // Uneven pieces, each written on its own turn of the loop.
            for (let at = 0, n = 1; at < bytes.length; at += n, n = (n % 7) + 1) {
              socket.write(bytes.subarray(at, at + n));
              await sleep(1);
            }
          } else {
            socket.write(bytes);
          }
          if (frame.kind === 'control' && frame.id === 0 && frame.json?.type === 'error' && FATAL.has(frame.json.code)) fatal = true;
        }
      }
      if (fatal || problems.length) {
        socket.end();
      } else {
        // The client says no more: it closes (after its call), and sends nothing unrecorded.
        const extra = await within(splitter.next(), timeoutMs, 'the client to close');
        if (extra !== null) problems.push(`an unrecorded client frame: ${describe(extra)}`);
        socket.end();
      }
    } catch (error) {
      problems.push(error.message);
      socket.destroy();
    } finally {
      finish({ problems });
    }
  });
  await new Promise((resolve) => server.listen(where.path, resolve));
  return {
    path: where.path,
    done,
    async close() {
      server.close();
      fs.rmSync(where.dir, { recursive: true, force: true });
    },
  };
}

/**
 * A warden a test plays itself: `onConnection(peer)` for each client,
 * where peer has `next()` (the next whole frame from the client, parsed
 * JSON in `.json` for control frames; null at its end), `send(kind, id,
 * payload)` (an object payload is sent as JSON), `hello(version)` (reads
 * the client's hello and answers it) and `socket`.
 */
export async function scriptedWarden(onConnection) {
  const where = socketPath();
  const sockets = new Set();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    const splitter = new FrameSplitter();
    socket.on('data', (chunk) => splitter.push(chunk));
    socket.on('end', () => splitter.end());
    socket.on('close', () => splitter.end());
    socket.on('error', () => splitter.end());
    const peer = {
      socket,
      splitter,
      async next(ms = 10000) {
        const frame = await within(splitter.next(), ms, 'a client frame');
        if (frame && frame.kind === 'control') frame.json = JSON.parse(frame.payload.toString('utf8'));
        return frame;
      },
      send(kind, id, payload) {
        const body = Buffer.isBuffer(payload) || payload instanceof Uint8Array ? payload : Buffer.from(JSON.stringify(payload));
        return socket.write(frameBytes(kind, id, body));
      },
      async hello(version = 3) {
        const hello = await peer.next();
        peer.send('control', 0, { type: 'hello', version, server: 'warden fake' });
        return hello;
      },
    };
    Promise.resolve(onConnection(peer)).catch((error) => {
      peer.error = error;
      socket.destroy();
    });
  });
  await new Promise((resolve) => server.listen(where.path, resolve));
  return {
    path: where.path,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
      fs.rmSync(where.dir, { recursive: true, force: true });
    },
  };
}
