// Small helpers of the client's tests against fake wardens.

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
export const exitEvent = (fields = {}) => ({
  type: 'exit',
  status: 0,
  code: 0,
  duration_ms: 1.5,
  stdout_bytes: 0,
  stderr_bytes: 0,
  drained: true,
  ...fields,
});
