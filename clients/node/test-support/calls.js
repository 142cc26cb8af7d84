// What a fixture's "call" means for this client: connect as the recorded
// hello says, perform the call, and give its outcome at the protocol's
// level (the shape of a fixture's "result"), or the error.

import { connect, WardenError } from '../index.js';

/** The connect options a fixture implies: the key of its recorded hello, if any. */
export function connectOptions(fixture) {
  const hello = fixture.frames.find((f) => f.from === 'client');
  const key = hello?.json?.key;
  return typeof key === 'string' ? { key } : {};
}

/** The exit report in the protocol's shape, with both outputs in base64. */
export function runOutcome(report, stdout = report.stdout, stderr = report.stderr) {
  const out = { type: 'exit', status: report.status };
  if (report.code !== null) out.code = report.code;
  if (report.signal !== null) out.signal = report.signal;
  if (report.limit !== null) out.limit = report.limit;
  if (report.error !== null) out.error = report.error;
  out.duration_ms = report.durationMs;
  out.stdout_bytes = report.stdoutBytes;
  out.stderr_bytes = report.stderrBytes;
  out.drained = report.drained;
  out.stdout_base64 = Buffer.from(stdout).toString('base64');
  out.stderr_base64 = Buffer.from(stderr).toString('base64');
  return out;
}

/** An exit report in the protocol's shape, without output (wait's answer). */
export function exitOutcome(report) {
  const { stdout_base64: _out, stderr_base64: _err, ...event } = runOutcome(report, Buffer.alloc(0), Buffer.alloc(0));
  return event;
}

/** Run options for a fixture's run args (protocol fields; stdin "pipe" fed with stdin_base64). */
function runOptions(args, call) {
  const options = { ...args };
  if (options.stdin === 'pipe') {
    options.stdin = Buffer.from(call.stdin_base64 ?? '', 'base64');
  }
  return options;
}

/** Performs `call` on a connected client; resolves to the protocol-level result. */
export async function perform(client, call) {
  const args = call.args ?? {};
  switch (call.method) {
    case 'hello_only':
      return { type: 'hello', version: client.version, server: client.server };
    case 'run': {
      const report = await client.run(runOptions(args, call));
      return runOutcome(report);
    }
    case 'signal_after_start': {
      const command = client.spawn(runOptions(args.run ?? {}, call));
      const outputs = Promise.all([command.stdout.bytes(), command.stderr.bytes()]);
      await command.started;
      const signalled = await command.kill(args.signal);
      const report = await command.exit;
      const [stdout, stderr] = await outputs;
      return { signalled, exit: runOutcome(report, stdout, stderr) };
    }
    case 'status':
      return client.status();
    case 'reload':
      return client.reload();
    case 'audit':
      return client.audit(args.kind, args.fields);
    case 'stop_shell':
      return client.stopShell(args.signal);
    case 'hold':
      return { type: 'held', until_ms: await client.hold(args.until_ms) };
    case 'list':
      return { type: 'commands', commands: await client.list() };
    case 'wait':
      return exitOutcome(await client.wait(args.command));
    default:
      throw new Error(`unknown fixture method ${call.method}`);
  }
}

/**
 * Connects to `socket` as the fixture says and performs its call:
 * {result} or {error} (a WardenError's code and message), and the client.
 */
export async function play(fixture, socket, { timeoutMs = 10000 } = {}) {
  let client = null;
  try {
    client = await connect({ socket, timeoutMs, ...connectOptions(fixture) });
    const result = await perform(client, fixture.call);
    return { result, client };
  } catch (error) {
    if (error instanceof WardenError) return { error: { code: error.code, message: error.wardenMessage }, client, thrown: error };
    throw error;
  }
}
