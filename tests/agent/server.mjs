// A small agent runtime, as the Node runtimes that live in a machine are:
// its own page on a port, and a shell tool that runs one command through
// warden's API, in a folder, returning the exit code and both outputs.
// Started by the machine definition's `command`, as runtime.
import http from 'node:http';
import { shellRun } from '/opt/warden-client/index.js';

const port = Number(process.env.AGENT_PORT || 3000);

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, 'http://agent');
  const reply = (status, body) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  try {
    if (url.pathname === '/') return reply(200, { agent: 'alive', pid: process.pid });
    if (url.pathname === '/key') return reply(200, { key: process.env.API_TOKEN ?? null });
    if (url.pathname === '/run') {
      const result = await shellRun(url.searchParams.get('cmd'), {
        folder: url.searchParams.get('folder') || undefined,
        timeoutMs: 30_000,
      });
      return reply(200, { exitCode: result.exitCode, stdout: result.stdout, stderr: result.stderr });
    }
    reply(404, { error: 'no such page' });
  } catch (e) {
    reply(500, { error: String(e && e.message || e) });
  }
});

server.listen(port, '0.0.0.0', () => console.log(`agent: serving on port ${port}`));
