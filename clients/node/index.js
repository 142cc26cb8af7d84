// A client of warden's API (protocol versions 1 to 9): frames over a unix
// socket, many commands at once on one connection, output streamed with
// back-pressure. No dependencies; Node 18 or later. docs/protocol.md in
// warden's repository is the reference for everything said on the wire.
//
// The entry point: every export is defined in lib/ (errors.js, frames.js,
// output.js, requests.js, commands.js, client.js, shell.js).

export { VERSION, PROTOCOL_VERSIONS, DEFAULT_SOCKET, Client, connect } from './lib/client.js';
export { HEADER_LEN, MAX_FRAME, Kind, encodeHeader, encodeFrame } from './lib/frames.js';
export {
  ERROR_CODES,
  WardenError,
  RefusedError,
  HelloRequiredError,
  UnsupportedVersionError,
  BadFrameError,
  FrameTooLargeError,
  BadJsonError,
  BadRequestError,
  DuplicateIdError,
  UnknownIdError,
  ShuttingDownError,
  NotConfinedError,
  AuditFailingError,
  GateClosedError,
  InternalError,
  ERROR_CLASSES,
  ConnectionError,
} from './lib/errors.js';
export { OutputStream } from './lib/output.js';
export { Command, Attachment } from './lib/commands.js';
export { closeShared, shellRun } from './lib/shell.js';
