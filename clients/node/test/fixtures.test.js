// Replays every exchange in clients/fixtures against this client, with a
// fake warden on a unix socket: the client's frames must be the recorded
// ones, and its outcome the recorded result or error. Each fixture is
// played twice: warden's frames written whole, and in small pieces.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { WardenError, ERROR_CLASSES } from '../index.js';
import { play } from '../test-support/calls.js';
import { replayWarden } from '../test-support/fake-warden.js';
import { loadFixtures } from '../test-support/frames.js';

const fixtures = loadFixtures();
const METHODS = new Set(['run', 'status', 'reload', 'audit', 'stop_shell', 'hold', 'list', 'wait', 'signal_after_start', 'hello_only']);

test('the fixtures are there, and well formed', () => {
  assert.ok(fixtures.length >= 13, `only ${fixtures.length} fixtures`);
  for (const f of fixtures) {
    assert.equal(`${f.name}.json`, f.file, 'a fixture is named after its file');
    assert.equal(typeof f.about, 'string');
    assert.ok(METHODS.has(f.call?.method), `${f.name}: method ${f.call?.method}`);
    assert.equal(typeof f.call.args, 'object');
    assert.ok(('result' in f) !== ('error' in f), `${f.name}: exactly one of result and error`);
    const first = f.frames[0];
    assert.equal(first.from, 'client');
    assert.equal(first.json.type, 'hello');
    assert.deepEqual(first.json.versions, [1, 2, 3, 4]);
    for (const frame of f.frames) {
      assert.ok(['client', 'warden'].includes(frame.from));
      assert.ok(['control', 'stdout', 'stderr', 'stdin'].includes(frame.kind));
      assert.ok(Number.isInteger(frame.id) && frame.id >= 0 && frame.id < 2 ** 32);
      assert.ok(('json' in frame) !== ('base64' in frame));
      assert.equal('json' in frame, frame.kind === 'control');
    }
    if (f.error) assert.ok(ERROR_CLASSES[f.error.code], `${f.name}: code ${f.error.code}`);
  }
});

test('the fixtures cover what every client must handle', () => {
  const names = new Set(fixtures.map((f) => f.name));
  for (const name of [
    'hello_version_4',
    'hello_unsupported_version',
    'run_stdout_stderr',
    'run_stdin_pipe',
    'run_missing_program',
    'run_timeout',
    'signal_running',
    'status',
    'audit',
    'reload_bad_request',
    'stop_shell',
    'hold',
    'list',
    'wait',
    'host_refused_wrong_key',
    'run_unknown_field',
  ]) {
    assert.ok(names.has(name), `missing fixture ${name}`);
  }
});

for (const fixture of fixtures) {
  describe(`fixture ${fixture.name}`, () => {
    for (const pieces of [false, true]) {
      test(pieces ? 'warden frames in small pieces' : 'warden frames whole', async () => {
        const fake = await replayWarden(fixture, { pieces });
        try {
          const outcome = await play(fixture, fake.path);
          await outcome.client?.close();
          const { problems } = await fake.done;
          assert.deepEqual(problems, []);
          if (fixture.error) {
            assert.ok(outcome.error, `expected error ${fixture.error.code}, got ${JSON.stringify(outcome.result)}`);
            assert.ok(outcome.thrown instanceof WardenError);
            assert.ok(outcome.thrown instanceof ERROR_CLASSES[fixture.error.code]);
            assert.equal(outcome.error.code, fixture.error.code);
            assert.ok(
              outcome.error.message.includes(fixture.error.message_contains),
              `${JSON.stringify(outcome.error.message)} lacks ${JSON.stringify(fixture.error.message_contains)}`,
            );
          } else {
            assert.equal(outcome.error, undefined, `unexpected error ${JSON.stringify(outcome.error)}`);
            assert.deepEqual(outcome.result, fixture.result);
          }
        } finally {
          await fake.close();
        }
      });
    }
  });
}
