// Types of @warden/client: a client of warden's API (protocol versions 1 to 9).

/// <reference types="node" />
import type { Buffer } from 'node:buffer';

export declare const VERSION: string;
/** The protocol versions offered in every hello: [1, 2, 3, 4, 5, 6, 7, 8, 9]. */
export declare const PROTOCOL_VERSIONS: readonly number[];
export declare const HEADER_LEN: 9;
/** No frame carries more than this (1 MiB), either way. */
export declare const MAX_FRAME: number;
/** '/run/warden/api.sock' */
export declare const DEFAULT_SOCKET: string;
export declare const Kind: Readonly<{ CONTROL: 1; STDOUT: 2; STDERR: 3; STDIN: 4 }>;

export type ErrorCode =
  | 'refused'
  | 'hello_required'
  | 'unsupported_version'
  | 'bad_frame'
  | 'frame_too_large'
  | 'bad_json'
  | 'bad_request'
  | 'duplicate_id'
  | 'unknown_id'
  | 'shutting_down'
  | 'not_confined'
  | 'audit_failing'
  | 'gate_closed'
  | 'internal';

export declare const ERROR_CODES: readonly ErrorCode[];

/** What warden answered with an error event. */
export declare class WardenError extends Error {
  constructor(code: string, message: string, options?: { id?: number; fatal?: boolean });
  /** The protocol's code (a string of a later version is kept as it is). */
  readonly code: ErrorCode | (string & {});
  /** warden's own message, unchanged. */
  readonly wardenMessage: string;
  /** The frame id the error answered (0: the connection). */
  readonly id: number;
  /** Whether warden closes the connection after it (not after a refused hand_keys). */
  readonly fatal: boolean;
  /** An error of the subclass for `code`. */
  static from(code: string, message: string, options?: { id?: number; fatal?: boolean }): WardenError;
}

type WardenErrorClass<C extends ErrorCode> = {
  new (message: string, options?: { id?: number; fatal?: boolean }): WardenError & { readonly code: C };
};
export declare const RefusedError: WardenErrorClass<'refused'>;
export declare const HelloRequiredError: WardenErrorClass<'hello_required'>;
export declare const UnsupportedVersionError: WardenErrorClass<'unsupported_version'>;
export declare const BadFrameError: WardenErrorClass<'bad_frame'>;
export declare const FrameTooLargeError: WardenErrorClass<'frame_too_large'>;
export declare const BadJsonError: WardenErrorClass<'bad_json'>;
export declare const BadRequestError: WardenErrorClass<'bad_request'>;
export declare const DuplicateIdError: WardenErrorClass<'duplicate_id'>;
export declare const UnknownIdError: WardenErrorClass<'unknown_id'>;
export declare const ShuttingDownError: WardenErrorClass<'shutting_down'>;
export declare const NotConfinedError: WardenErrorClass<'not_confined'>;
export declare const AuditFailingError: WardenErrorClass<'audit_failing'>;
export declare const GateClosedError: WardenErrorClass<'gate_closed'>;
export declare const InternalError: WardenErrorClass<'internal'>;
/** The subclass of WardenError for each code. */
export declare const ERROR_CLASSES: Readonly<{ [C in ErrorCode]: WardenErrorClass<C> }>;

/**
 * The connection failed. `code` is the system's code when there is one
 * (ENOENT, ECONNREFUSED, EACCES, EPIPE...), else 'closed', 'timeout' (no
 * hello in time) or 'protocol' (warden sent what this client cannot read).
 */
export declare class ConnectionError extends Error {
  constructor(message: string, options?: { code?: string; cause?: unknown });
  readonly code: string;
}

export declare function encodeHeader(kind: number, id: number, len: number): Buffer;
export declare function encodeFrame(kind: number, id: number, payload?: Bytes | null): Buffer;

export type Bytes = string | Buffer | Uint8Array | ArrayBuffer;

/** Lowers the policy's limits for one command (never raises them). */
export interface Limits {
  cpu_seconds?: number;
  address_space_bytes?: number;
  processes?: number;
  output_bytes?: number;
  file_size_bytes?: number;
  open_files?: number;
  timeout_ms?: number;
  /** Held only where commands get cgroups of their own (status layer `cgroups`). */
  memory_bytes?: number;
  /** Percent of one CPU; held only where commands get cgroups of their own. */
  cpu_percent?: number;
}

/** A terminal's size, in characters: each side 1 to 1000. */
export interface TerminalSize {
  rows: number;
  cols: number;
}

/**
 * A command to run. Exactly one of argv and shell. Any other key is sent
 * to warden as it is, so a misspelt field is refused (bad_request) rather
 * than dropped.
 */
export interface RunOptions {
  /** The program (found in PATH when it has no '/') and its arguments. */
  argv?: string[];
  /** Instead of argv: a line run by /bin/sh -c. */
  shell?: string;
  /** A folder under the workspace, made (as shell, 0755) if missing; default shell's home. */
  folder?: string;
  /** Variables added to the clean environment. */
  env?: Record<string, string>;
  /** Kill the command's whole process group after this many milliseconds. */
  timeout?: number;
  /** The same as timeout. */
  timeoutMs?: number;
  /** The protocol's own name for timeout. */
  timeout_ms?: number;
  /** Leave processes the command started in its group running after it exits. */
  keepBackground?: boolean;
  keep_background?: boolean;
  limits?: Limits;
  /**
   * run(): bytes (a string is UTF-8) sent to the command's stdin, which is
   * then closed; undefined: /dev/null. spawn(): also 'pipe' (write() and
   * end() yourself) or 'null' (/dev/null).
   */
  stdin?: Bytes | null;
  /**
   * Version 4: run it on a terminal of this size (its stdin, stdout and
   * stderr, and its controlling terminal). Everything it prints comes on
   * stdout (stderr stays empty); stdin is open without 'pipe', and what is
   * written is typed raw ('\x03' is Ctrl-C: SIGINT for its foreground job).
   */
  pty?: TerminalSize | null;
  /** Version 4: run() with detach: true is detach() (see DetachOptions). */
  detach?: boolean;
  /** Version 4, with detach: its name in list(); without detach warden refuses it (bad_request). */
  tag?: string;
  [field: string]: unknown;
}

/**
 * Version 4: a detached command to start, as for spawn. Its stdin is
 * 'pipe' (written through attach()) or none; on a pty it is always open.
 */
export interface DetachOptions extends Omit<RunOptions, 'stdin' | 'detach' | 'tag'> {
  detach?: true;
  /** 1 to 128 printable bytes (warden checks): its name in list(). */
  tag?: string;
  stdin?: 'pipe' | 'null' | null;
}

/** Version 4: what detach() resolves to. */
export type DetachedRun =
  /** It runs, whoever is connected. */
  | { command: number; pid: number; tag: string | null; exit: null }
  /** It could not start: the exit report says why (status 127, 126 or 125; `error`). */
  | { command: null; pid: null; tag: string | null; exit: StreamedExit };

export interface ExitReport {
  /** The shell's convention: the exit code, or 128+n after death by signal n. */
  status: number;
  code: number | null;
  /** e.g. 'SIGTERM' */
  signal: string | null;
  /** The limit that ended it: 'timeout', 'output', 'memory', 'processes', 'cpu', 'file_size'. */
  limit: string | null;
  /** Why it could not start (status 127, 126 or 125); then there was no started event. */
  error: string | null;
  durationMs: number;
  stdoutBytes: number;
  stderrBytes: number;
  /** False when output was still held open after the drain period and was cut. */
  drained: boolean;
  /** warden's name for the command and its pid (null if it never started). */
  command: number | null;
  pid: number | null;
}

/** What run() resolves to: the exit report and both outputs whole. */
export interface RunResult extends ExitReport {
  stdout: Buffer;
  stderr: Buffer;
}

/** What spawn()'s exit resolves to: the outputs were streamed. */
export interface StreamedExit extends ExitReport {
  stdout: null;
  stderr: null;
}

/**
 * One output stream: an async iterable of Buffers for one reader. It holds
 * at most about highWaterMark bytes unread; past that the client stops
 * reading the connection (and warden's commands on it wait) until the
 * reader catches up. Leaving a for-await loop early discards the rest.
 */
export declare class OutputStream implements AsyncIterable<Buffer> {
  readonly name: 'stdout' | 'stderr';
  readonly bufferedBytes: number;
  readonly full: boolean;
  readonly ended: boolean;
  [Symbol.asyncIterator](): AsyncIterator<Buffer>;
  /** Drops what is held and whatever else comes. */
  discard(): void;
  /** The rest of the stream in one Buffer (small outputs only). */
  bytes(): Promise<Buffer>;
  text(): Promise<string>;
}

export interface Started {
  command: number;
  pid: number;
}

export interface SignalledEvent {
  type: 'signalled';
  target: number;
  signal: string;
}

/** Version 4: warden's answer to a resize. */
export interface ResizedEvent {
  type: 'resized';
  target: number;
  rows: number;
  cols: number;
}

/** Version 4: warden's answer to signalCommand (and an attachment's kill). */
export interface CommandSignalledEvent {
  type: 'command_signalled';
  command: number;
  signal: string;
}

/** Version 4: the exit report of a detached command, as its exit event says it (for list()). */
export interface ExitEvent {
  status: number;
  code?: number;
  signal?: string;
  limit?: string;
  error?: string;
  duration_ms: number;
  stdout_bytes: number;
  stderr_bytes: number;
  drained: boolean;
}

/** Version 4: a detached command, as list() shows it (warden's shape). */
export interface DetachedCommand {
  command: number;
  tag?: string;
  argv: string[];
  folder?: string;
  pid: number;
  /** When it started (Unix ms). */
  started_ms: number;
  state: 'running' | 'exited';
  /** How it ended, once it has. */
  exit?: ExitEvent;
  /** Connections following it now. */
  attached: number;
  /** Output let go because nobody was attached and the buffer (1 MiB) was full. */
  dropped_bytes: number;
}

/** A command running through warden (client.spawn). */
export declare class Command {
  /** Its frame id on this connection. */
  readonly id: number;
  readonly stdout: OutputStream;
  readonly stderr: OutputStream;
  /** {command, pid}; null when it could not start (exit says why); rejects if warden refused the run. */
  readonly started: Promise<Started | null>;
  /** The exit report; rejects with a WardenError if warden refused the run, a ConnectionError if the connection ended first. */
  readonly exit: Promise<StreamedExit>;
  readonly command: number | null;
  readonly pid: number | null;
  readonly stdinOpen: boolean;
  readonly done: boolean;
  /** unknown_id errors warden sent about stdin frames that came too late; they do not end the command. */
  readonly stdinErrors: WardenError[];
  /** Its terminal's size as last asked for, when it runs on one (pty); else null. */
  readonly terminal: TerminalSize | null;
  /** Writes to stdin (spawned with stdin 'pipe', or on a pty: typed raw), in frames of at most 1 MiB; resolves when the socket takes more. */
  write(data: Bytes): Promise<void>;
  /** Closes stdin (an empty stdin frame) after pending writes. */
  end(): Promise<void>;
  /** Signals the whole process group: 'TERM', 'SIGTERM' or '15' (default 'TERM'). */
  kill(signal?: string | number): Promise<SignalledEvent>;
  /**
   * Version 4: resizes its terminal (its foreground job gets SIGWINCH).
   * UnknownIdError when it runs on no terminal or has ended; BadRequestError
   * for a side outside 1 to 1000.
   */
  resize(rows: number, cols: number): Promise<ResizedEvent>;
}

/**
 * Version 4: a detached command followed on a frame id of this connection
 * (client.attach): what it printed while nobody was attached (the last
 * MiB), then live output, then its exit. Closing the connection only stops
 * following it.
 */
export declare class Attachment {
  /** Its frame id on this connection. */
  readonly id: number;
  /** warden's number for the command. */
  readonly command: number;
  /** Always null: list() has it. */
  readonly pid: null;
  readonly stdout: OutputStream;
  readonly stderr: OutputStream;
  /** Resolves once warden follows it for this connection; UnknownIdError when it has no such command. */
  readonly attached: Promise<{ command: number; droppedBytes: number }>;
  /** Output let go before this attachment (null until attached). */
  readonly droppedBytes: number | null;
  /** Resolves to {command, pid: null} once attached. */
  readonly started: Promise<{ command: number; pid: null } | null>;
  /** The command's exit report (outputs streamed); rejects as attached does, or with a ConnectionError. */
  readonly exit: Promise<StreamedExit>;
  readonly stdinOpen: boolean;
  readonly done: boolean;
  /** unknown_id errors warden sent about stdin: the command takes none (it was not detached with stdin 'pipe' or a pty). */
  readonly stdinErrors: WardenError[];
  /** Its terminal's size as last resized through this attachment, else null. */
  readonly terminal: TerminalSize | null;
  /** Writes to its stdin (detached with stdin 'pipe', or typed into its pty), in frames of at most 1 MiB. */
  write(data: Bytes): Promise<void>;
  /** Closes its stdin (an empty stdin frame), for every attachment. */
  end(): Promise<void>;
  /** Signals its whole process group, as client.signalCommand; UnknownIdError once it has ended. */
  kill(signal?: string | number): Promise<CommandSignalledEvent>;
  /** Resizes its terminal (detached with a pty); UnknownIdError when it runs on none or has ended. */
  resize(rows: number, cols: number): Promise<ResizedEvent>;
}

export interface UserState {
  name: string;
  uid: number;
  gid: number;
  groups: number[];
  home: string;
}
export interface PathState {
  path: string;
  expected: string;
  found: string;
  ok: boolean;
}
export interface LayerState {
  layer: string;
  required: boolean;
  holds: boolean;
  detail: string;
}
export interface RunningCommand {
  command: number;
  pid: number;
  argv: string[];
  folder: string | null;
  requester_uid: number;
  running_ms: number;
}
export interface ProxyState {
  listening: string[];
  hosts_from: string;
  hosts: string[];
  allow_addresses: string[];
  carried: number;
  refused: number;
}
/** Version 8: the answer to endRun. */
export interface RunEnded {
  type: 'run_ended';
  run: string;
  spent_micro_usd: number;
  /** 'ended'; 'budget' when the run reached its budget before it ended. */
  how: string;
}

/** Version 8: a run's card (docs/run-card.md in warden's repository). */
export interface RunCard {
  run: string;
  /** RFC 3339 times of its run_begin and run_end lines (ended: null while open). */
  began: string;
  ended: string | null;
  /** 'ended', 'budget', 'machine_stopped', or 'open'. */
  how: string;
  budget_micro_usd: number;
  spent_micro_usd: number;
  budget_usd: number;
  spent_usd: number;
  models: Array<{
    model: string;
    requests: number;
    input_tokens: number;
    output_tokens: number;
    cache_write_tokens: number;
    cache_read_tokens: number;
    micro_usd: number;
  }>;
  requests: Array<{
    time: string;
    provider: string | null;
    model: string | null;
    status: number | null;
    micro_usd: number | null;
    cut: boolean | null;
    refused: string | null;
    estimated: boolean | null;
    input_tokens: number | null;
    output_tokens: number | null;
    duration_ms: number | null;
  }>;
  /** The commands started while the run was open (null fields: still running). */
  commands: Array<{
    command: number;
    time: string;
    argv: string[];
    status: number | null;
    exit: number | null;
    signal: string | null;
    duration_ms: number | null;
    limit: string | null;
  }>;
  hosts: {
    reached: Array<{ host: string; connections: number }>;
    refused: Array<{ host: string; refusal: string; count: number }>;
  };
}

/** Version 9: whether the machine is ready, and what says so. */
export interface ReadyState {
  /** What the definition waits for: 'runtime' or 'port N'; absent: nothing. */
  wanted?: string;
  /** Since when it is ready, in ms after warden started; absent: not yet. */
  after_ms?: number;
  /** What made it ready: 'runtime' or 'port N'. */
  by?: string;
}

/** Version 4: when the machine was last used, what holds it, and when it stops. */
export interface ActivityState {
  /** Since the last request or command's end. */
  idle_ms: number;
  /** The runtime's hold, when one is in force (Unix ms). */
  held_until_ms?: number;
  /** The machine stops itself after this long idle; absent: never. */
  idle_stop_s?: number;
  /** Version 9: the runtime's next job (Unix ms), when it said one. */
  next_job_at_ms?: number;
  /** Version 9: commands running now. */
  running?: number;
}
export interface Status {
  type: 'status';
  version: string;
  protocol: number;
  pid1: boolean;
  uptime_ms: number;
  boot_ms: number;
  users: UserState[];
  layout: PathState[];
  main?: { pid: number; argv: string[] };
  running: RunningCommand[];
  /** Version 3. */
  shell_processes?: { pid: number; name: string }[];
  shell_process_count?: number;
  /** Version 3: the runtime's gate for shell commands. */
  gate?: { closed: boolean; reason?: string; since_ms: number };
  /** Version 4. */
  activity?: ActivityState;
  /** Version 9. */
  ready?: ReadyState;
  commands_started: number;
  audit_log: string;
  layers: LayerState[];
  refusing?: string;
  audit_failing?: string;
  proxy?: ProxyState;
}

export interface ClientOptions {
  /** Default: $WARDEN_SOCKET, else /run/warden/api.sock. */
  socket?: string;
  /** The machine's key, for its host socket. */
  key?: string;
  /** For the hello's answer; default 30000. */
  timeoutMs?: number;
  /** Default for spawn(); 1 MiB. */
  highWaterMark?: number;
  /** The hello's client field; default "warden-node <version>". */
  clientName?: string;
  /** Let the process exit while no request or command is pending. */
  unrefWhenIdle?: boolean;
}

/** One connection to warden, after the hello. */
export declare class Client {
  /** The protocol version agreed in the hello. */
  readonly version: number;
  /** warden's name and version. */
  readonly server: string;
  readonly closed: boolean;
  /** Commands running on this connection. */
  readonly running: number;
  onClose(listener: (reason: Error) => void): void;
  /** Version 4: with detach: true, detach(options). */
  run(options: DetachOptions & { detach: true }): Promise<DetachedRun>;
  /** Runs a command to its end, collecting both outputs. */
  run(options: RunOptions): Promise<RunResult>;
  /** Starts a command and streams it (not a detached one: TypeError). */
  spawn(options: RunOptions, streaming?: { highWaterMark?: number }): Command;
  /**
   * Version 4: starts a detached command, which runs on whoever is
   * connected. BadRequestError for a bad tag or when 64 run already.
   */
  detach(options: DetachOptions): Promise<DetachedRun>;
  /** Version 4: follows a detached command on a new frame id. */
  attach(command: number, streaming?: { highWaterMark?: number }): Attachment;
  /** Version 4: a detached command's exit report once it has ended (at once if it has); UnknownIdError for none such. */
  wait(command: number): Promise<StreamedExit>;
  /** Version 4: the detached commands, running or lately ended (the last 64). */
  list(): Promise<DetachedCommand[]>;
  /** Version 4: signals a detached command's whole process group (default TERM); UnknownIdError when it is not running. */
  signalCommand(command: number, signal?: string | number): Promise<CommandSignalledEvent>;
  status(): Promise<Status>;
  /** Has warden read network.json again. */
  reload(): Promise<ProxyState & { type: 'reloaded' }>;
  /** Appends a runtime event ([a-z0-9_]{1,64}) to the audit log. */
  audit(kind: string, fields?: unknown): Promise<{ type: 'recorded'; seq: number }>;
  /** Version 3: signals every process of shell (default KILL, round after round). */
  stopShell(signal?: string): Promise<{ type: 'shell_stopped'; signalled: number; left: number }>;
  /** Version 3: closes the runtime's gate; shell commands are refused (WardenError 'gate_closed') with the reason. */
  closeGate(reason: string): Promise<{ type: 'gate'; closed: true; reason: string; since_ms: number }>;
  /** Version 3: opens the gate again. */
  openGate(): Promise<{ type: 'gate'; closed: false; since_ms: number }>;
  /** Version 4: keeps the machine awake until untilMs (Unix ms; a time past or 0 lets go); resolves to the hold in force (0: none). */
  hold(untilMs: number): Promise<number>;
  /** Version 9, the runtime's: says the machine is ready (what `up` and `--start` wait for with "ready": "runtime"); resolves to since when, in ms after warden started. */
  ready(): Promise<number>;
  /** Version 9: when the runtime's next job is due (Unix ms; 0: none); the machine stays up within five minutes of it, and `warden machine serve` starts it ahead; resolves to it. */
  nextJob(atMs: number): Promise<number>;
  /** Version 4, the host's door only: hands the runtime its keys (a .env text); resolves to their names. On the machine's own socket: RefusedError, the connection stays open. */
  handKeys(text: string): Promise<string[]>;
  /** Version 8: opens a run whose provider requests count against budgetUsd (default: the machine's spend.per_run_usd); resolves to the budget in micro-dollars. */
  beginRun(run: string, budgetUsd?: number): Promise<number>;
  /** Version 8: ends a run; what it spent (micro-dollars) and how it ended. */
  endRun(run: string): Promise<RunEnded>;
  /** Version 8: the run's card, built by warden from its audit log. */
  card(run: string): Promise<RunCard>;
  /** Version 2: stops the machine. */
  shutdown(): Promise<{ type: 'shutting_down' }>;
  /** Closes the connection; warden kills the commands still running on it (not detached ones). */
  close(options?: { timeoutMs?: number }): Promise<void>;
}

/** Connects and says hello. */
export declare function connect(options?: ClientOptions): Promise<Client>;

export interface ShellRunOptions {
  folder?: string;
  timeoutMs?: number;
  env?: Record<string, string>;
  socket?: string;
  key?: string;
}

export interface ShellRunResult {
  /** The shell's convention: 128+n after death by signal n. */
  exitCode: number;
  stdout: string;
  /** When warden could not start it, or a limit ended it, a "warden: ..." line ends stderr. */
  stderr: string;
  signal: string | null;
  limit: string | null;
  error: string | null;
  durationMs: number;
}

/**
 * One shell command, in the workspace, as shell, in a folder made if
 * missing, returning the exit code and both outputs (UTF-8). Calls share
 * one connection per socket and key, which never keeps the process alive.
 */
export declare function shellRun(command: string, options?: ShellRunOptions): Promise<ShellRunResult>;

/** Closes the connections shellRun keeps. */
export declare function closeShared(): Promise<void>;
