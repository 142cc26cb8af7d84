// examples/node-agent/agent.mjs: a small agent runtime, at home in a warden
// machine. warden (PID 1) starts it as `runtime`, with the owner's key
// AGENT_TOKEN in its environment and its .env. It serves a page on port
// 8080, published on the host's 127.0.0.1, and runs the commands it is
// asked for as `shell`, through warden's socket, with the Node client the
// base image carries. Node 18, no dependencies.
import http from 'node:http';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { shellRun } from '@warden/client';

const PORT = 8080;
const FOLDER = 'project'; // shell's commands run in /home/runtime/workspace/project

// A small build, as an agent would run one: a module, its test, the test
// run, a commit. Then what shell must never do: read the runtime's key.
const BUILD = [
  'id -un',
  `echo 'export const add = (a, b) => a + b;' > add.mjs`,
  `echo "import assert from 'node:assert'; import { add } from './add.mjs'; assert.equal(add(2, 3), 5); console.log('add.test.mjs: ok');" > add.test.mjs`,
  'node add.test.mjs',
  'git init -q && git add . && git -c user.name=agent -c user.email=agent@machine commit -q --allow-empty -m build && git log --oneline -1',
  'cat /home/runtime/.env',
];

// One line run as shell; what it printed and how it ended, as text.
async function run(line) {
  const r = await shellRun(line, { folder: FOLDER, timeoutMs: 60_000 });
  return `$ ${line}\n${r.stdout}${r.stderr}(exit ${r.exitCode})\n`;
}

// The runtime's own key, shown by its digest only: the runtime has it,
// in its environment and in its .env, which shell cannot read.
function key() {
  const value = process.env.AGENT_TOKEN;
  const file = readFileSync('/home/runtime/.env', 'utf8');
  if (!value) return 'AGENT_TOKEN: not handed to the runtime';
  const digest = createHash('sha256').update(value).digest('hex').slice(0, 16);
  const inFile = file.includes(`AGENT_TOKEN=${value}`) ? 'and in its .env' : 'not in its .env';
  return `AGENT_TOKEN: in the runtime's environment ${inFile}, sha256 ${digest}...`;
}

function page() {
  return [
    `node-agent: an agent runtime in a warden machine, as ${userInfo().username} (pid ${process.pid})`,
    key(),
    'POST /build  runs a small build as shell',
    'POST /run    runs the body, one line for /bin/sh, as shell',
    '',
  ].join('\n');
}

// The request's body, up to 64 KiB.
async function body(req) {
  let text = '';
  for await (const chunk of req) {
    text += chunk;
    if (text.length > 65536) throw new Error('body too large');
  }
  return text;
}

const server = http.createServer(async (req, res) => {
  const reply = (status, text) => {
    res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8' });
    res.end(text);
  };
  try {
    if (req.method === 'GET' && req.url === '/') return reply(200, page());
    if (req.method === 'POST' && req.url === '/build') {
      let report = '';
      for (const line of BUILD) report += await run(line);
      return reply(200, report);
    }
    if (req.method === 'POST' && req.url === '/run') return reply(200, await run(await body(req)));
    reply(404, 'no such page\n');
  } catch (e) {
    reply(500, `${e && e.message || e}\n`);
  }
});

server.listen(PORT, () => console.log(`node-agent: serving on port ${PORT}`));
