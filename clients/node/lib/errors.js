// The errors of warden's API: WardenError and a subclass for each code
// warden sends (docs/protocol.md, "Errors"), and ConnectionError for a
// connection that failed.

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
export const FATAL = new Set(['refused', 'hello_required', 'unsupported_version', 'bad_frame', 'frame_too_large']);
/**
 * Requests whose `refused` answer is not fatal: warden refuses them and
 * keeps the connection (hand_keys on any door but the host's).
 */
export const REFUSED_IN_PLACE = new Set(['keys_handed']);

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
