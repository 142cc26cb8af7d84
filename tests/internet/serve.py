#!/usr/bin/env python3
"""The tests' own small internet: every service a test may reach (or must
fail to reach), run inside the "internet" network namespace that
tests/common/internet.rs builds. Standard library only, so the test machine
needs nothing but python3.

Services, on both the IPv4 and the IPv6 address given:
  DNS  UDP+TCP 53  A/AAAA answers from a JSON zone; other names NXDOMAIN
  HTTP TCP 80      GET -> "hello <Host> <path>"; /bytes/<n> -> n bytes;
                   /repo.git/... -> static files (a dumb-HTTP git repository);
                   /echo... -> the request's headers, in the body and as
                   X-Echo-<Name> headers (?chunked=1, ?gzip=1, ?b64=1,
                   ?url=1: see send_echo), also logged to headers.log;
                   /redirect?to=<url> -> 302 to <url>;
                   POST /v1/messages, /v1/chat/completions, /v1/responses ->
                   a model provider (see send_provider), logged to
                   provider.log;
                   /smart/... -> git http-backend on --git-root (smart HTTP,
                   clone and push)
  HTTPS TCP 443    the same handler, behind TLS
  TCP 22, 8080     write one line and close
  UDP 9999         echo
Every query, request and connection is appended to a log file in --dir, so a
test can prove whether something reached the internet or not.
"""

import argparse
import base64
import gzip
import http.server
import json
import os
import signal
import socket
import socketserver
import ssl
import struct
import subprocess
import sys
import threading
import time
import urllib.parse

LOCK = threading.Lock()
ARGS = None
ZONE = {}

# A stalled client must not hold a thread for ever.
CLIENT_TIMEOUT = 30


def log(name, line):
    # Opened per line (under a lock) so the Rust side may truncate the file.
    with LOCK:
        with open(os.path.join(ARGS.dir, name), "a") as f:
            f.write(line + "\n")


# ---------------------------------------------------------------- DNS

TYPES = {1: "A", 28: "AAAA"}
FAMILY = {"A": socket.AF_INET, "AAAA": socket.AF_INET6}
NOERROR, FORMERR, NXDOMAIN = 0, 1, 3
RCODES = {NOERROR: "NOERROR", FORMERR: "FORMERR", NXDOMAIN: "NXDOMAIN"}
TTL = 5


def parse_question(msg):
    """(id, flags, qname, qtype, qclass, end of question) or None."""
    if len(msg) < 12:
        return None
    qid, flags, qdcount = struct.unpack("!HHH", msg[:6])
    if qdcount != 1 or flags & 0x8000:
        return None
    labels, pos = [], 12
    # A name has at most 127 labels; the bound keeps a hostile packet short.
    for _ in range(128):
        if pos >= len(msg):
            return None
        n = msg[pos]
        pos += 1
        if n == 0:
            break
        if n & 0xC0:
            return None  # no compression in a question we send
        labels.append(msg[pos : pos + n].decode("ascii", "replace"))
        pos += n
    else:
        return None
    if pos + 4 > len(msg):
        return None
    qtype, qclass = struct.unpack("!HH", msg[pos : pos + 4])
    return qid, flags, ".".join(labels).lower(), qtype, qclass, pos + 4


def answer(msg, client):
    q = parse_question(msg)
    if q is None:
        return None
    qid, flags, qname, qtype, qclass, end = q
    records = ZONE.get(qname.rstrip("."))
    rcode = NXDOMAIN if records is None else NOERROR
    tname = TYPES.get(qtype, str(qtype))
    rdatas = []
    if records is not None and qtype in TYPES:
        rdatas = [socket.inet_pton(FAMILY[tname], a) for a in records.get(tname, [])]
    # QR, same opcode and RD, AA and RA set.
    rflags = 0x8000 | (flags & 0x7900) | 0x0400 | 0x0080 | rcode
    out = struct.pack("!HHHHHH", qid, rflags, 1, len(rdatas), 0, 0) + msg[12:end]
    for rdata in rdatas:
        # 0xC00C: the name of the question, at offset 12.
        out += struct.pack("!HHHIH", 0xC00C, qtype, qclass, TTL, len(rdata)) + rdata
    log("dns.log", f"{qname} {tname} {RCODES[rcode]} {len(rdatas)} from {client[0]}")
    return out


class DnsUdp(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        reply = answer(data, self.client_address)
        if reply is not None:
            sock.sendto(reply, self.client_address)


class DnsTcp(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.settimeout(CLIENT_TIMEOUT)
        f = self.request.makefile("rb")
        # Bounded: a client may pipeline a few queries on one connection.
        for _ in range(100):
            head = f.read(2)
            if len(head) < 2:
                return
            (n,) = struct.unpack("!H", head)
            reply = answer(f.read(n), self.client_address)
            if reply is None:
                return
            self.request.sendall(struct.pack("!H", len(reply)) + reply)


# ---------------------------------------------------------------- HTTP(S)

CHUNK = 64 * 1024
# Bounds on what a request may send: its body (de-chunked), a line of its
# chunked framing, the trailer lines after the last chunk.
MAX_BODY = 64 * 1024 * 1024
MAX_LINE = 1024
MAX_TRAILERS = 100
# The chunk size of /echo?chunked=1: small, so a secret in the body is cut.
ECHO_CHUNK = 5
# What git http-backend's environment takes from ours.
GIT_ENV = ("PATH", "LANG", "LC_ALL")


def header_map(items):
    """The headers as a dict, names as received; a repeated name's values
    joined with ", " (so a test sees both)."""
    out = {}
    for name, value in items:
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def flag(query, name):
    return "1" in query.get(name, ())


def chunked(body, size):
    """`body` in Transfer-Encoding: chunked framing, `size` bytes a chunk."""
    pieces = (body[i : i + size] for i in range(0, len(body), size))
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def parse_cgi(out):
    """(status, [(name, value)], body) of a CGI script's output, or None."""
    ends = [(out.find(sep), sep) for sep in (b"\r\n\r\n", b"\n\n") if sep in out]
    if not ends:
        return None
    at, sep = min(ends)
    status, headers = 200, []
    for line in out[:at].decode("latin-1").split("\n"):
        name, colon, value = line.rstrip("\r").partition(":")
        if not colon:
            return None
        name, value = name.strip(), value.strip()
        if name.lower() == "status":
            status = int(value.split()[0])
        elif name.lower() not in ("content-length", "transfer-encoding", "connection"):
            headers.append((name, value))
    return status, headers, out[at + len(sep) :]


class Web(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    scheme = "http"

    def log_message(self, format, *args):
        pass  # requests are logged in handle_any, in a fixed form

    def send_body(self, body, ctype="text/plain"):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_any(self):
        host = self.headers.get("Host", "")
        log("http.log", f"{self.scheme} {self.command} {host} {self.path} from {self.client_address[0]}")
        body = self.read_body()
        if body is None:
            return self.send_error(400, "bad or too big a body")
        path, _, query = self.path.partition("?")
        if path.startswith("/bytes/"):
            return self.send_bytes(path[len("/bytes/") :])
        if path == "/repo.git" or path.startswith("/repo.git/"):
            return self.send_static(path)
        if path.startswith("/echo"):
            return self.send_echo(urllib.parse.parse_qs(query))
        if path == "/redirect":
            return self.send_redirect(urllib.parse.parse_qs(query))
        if path == "/smart" or path.startswith("/smart/"):
            return self.send_git(path[len("/smart") :], query, body)
        if path in PROVIDER_PATHS and self.command == "POST":
            return self.send_provider(path, body)
        self.send_body(f"hello {host} {self.path}".encode())

    def send_provider(self, path, body):
        """A model provider that answers with known usage: input 1000
        tokens (Anthropic: 300 of them written to its cache, 200 read from
        it; OpenAI: 200 read from its cache), output `max_tokens` (default
        500) tokens, streamed as events of 40 bytes of text (10 tokens'
        worth) each when asked, 5 ms apart. Logs the model and the key
        headers it received to provider.log."""
        try:
            asked = json.loads(body or b"{}")
        except ValueError:
            return self.send_error(400, "not JSON")
        key = self.headers.get("x-api-key") or self.headers.get("Authorization") or ""
        log("provider.log", json.dumps({"path": path, "model": asked.get("model"), "key": key,
                                         "stream": bool(asked.get("stream"))}))
        output = int(asked.get("max_tokens") or 500)
        deltas = ["x" * 40 for _ in range(output // 10)]
        if not asked.get("stream"):
            answer = PROVIDER_JSON[path](output)
            return self.send_body(json.dumps(answer).encode(), "application/json")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in PROVIDER_STREAM[path](deltas, output, asked):
                data = event.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                time.sleep(0.005)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            log("provider.log", json.dumps({"path": path, "cut_by_client": True}))

    def read_body(self):
        """The request's body, de-chunked; None if malformed or too big.
        Every read is bounded in size, and in time by CLIENT_TIMEOUT."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self.read_chunked()
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            return None
        if not 0 <= length <= MAX_BODY:
            return None
        body = self.rfile.read(length)
        return body if len(body) == length else None

    def read_chunked(self):
        parts, total = [], 0
        while True:
            line = self.rfile.readline(MAX_LINE)
            try:
                n = int(line.split(b";", 1)[0], 16)
            except ValueError:
                return None
            if n < 0 or total + n > MAX_BODY:
                return None
            if n == 0:
                break
            chunk = self.rfile.read(n + 2)
            if len(chunk) != n + 2 or chunk[n:] != b"\r\n":
                return None
            parts.append(chunk[:n])
            total += n
        for _ in range(MAX_TRAILERS):
            if self.rfile.readline(MAX_LINE) in (b"\r\n", b"\n", b""):
                return b"".join(parts)
        return None

    def send_echo(self, query):
        """200, the body every request header as a "Name: value" line, each
        also sent back as "X-Echo-Name: value". ?b64=1 and ?url=1 append
        "b64=<base64>" and "url=<percent-encoded>" lines of the Authorization
        value after "Bearer "; ?gzip=1 gzips the body whatever the client
        accepts; ?chunked=1 sends it chunked, ECHO_CHUNK bytes a chunk."""
        headers = self.headers.items()
        log("headers.log", f"{self.scheme} {self.command} {self.path} {json.dumps(header_map(headers))}")
        # Headers are read as latin-1: encoding back gives the bytes received.
        secret = self.headers.get("Authorization", "").removeprefix("Bearer ").encode("latin-1")
        text = "".join(f"{name}: {value}\n" for name, value in headers)
        if flag(query, "b64"):
            text += f"b64={base64.b64encode(secret).decode()}\n"
        if flag(query, "url"):
            text += f"url={urllib.parse.quote(secret, safe='')}\n"
        body = text.encode("latin-1")
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        for name, value in headers:
            self.send_header(f"X-Echo-{name}", value)
        if flag(query, "gzip"):
            body = gzip.compress(body)
            self.send_header("Content-Encoding", "gzip")
        if flag(query, "chunked"):
            self.send_header("Transfer-Encoding", "chunked")
            body = chunked(body, ECHO_CHUNK)
        else:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_redirect(self, query):
        to = query.get("to", [""])[0]
        if not to or "\r" in to or "\n" in to:
            return self.send_error(400, "no or bad to=")
        self.send_response(302)
        self.send_header("Location", to)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def cgi_env(self, path_info, query, body):
        """git http-backend's environment, as a CGI server would set it."""
        env = {k: os.environ[k] for k in GIT_ENV if k in os.environ}
        env.update(
            GIT_PROJECT_ROOT=ARGS.git_root,
            GIT_HTTP_EXPORT_ALL="1",
            GIT_CONFIG_NOSYSTEM="1",
            GIT_CONFIG_GLOBAL="/dev/null",
            GATEWAY_INTERFACE="CGI/1.1",
            SERVER_PROTOCOL=self.request_version,
            SERVER_NAME="internet.test",
            SERVER_PORT=str(self.server.server_port),
            REQUEST_METHOD=self.command,
            PATH_INFO=path_info,
            QUERY_STRING=query,
            CONTENT_TYPE=self.headers.get("Content-Type", ""),
            CONTENT_LENGTH=str(len(body)),
            # Set, so http-backend allows receive-pack (a push).
            REMOTE_USER="tester",
            REMOTE_ADDR=self.client_address[0],
        )
        # HTTP_CONTENT_ENCODING among them: http-backend inflates a gzip body.
        for name, value in header_map(self.headers.items()).items():
            key = "HTTP_" + name.upper().replace("-", "_")
            if key not in ("HTTP_CONTENT_TYPE", "HTTP_CONTENT_LENGTH", "HTTP_TRANSFER_ENCODING"):
                env[key] = value
        if "Git-Protocol" in self.headers:
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        return env

    def send_git(self, path_info, query, body):
        """Smart-HTTP git: the request run through git http-backend (CGI)."""
        try:
            done = subprocess.run(
                ["git", "http-backend"],
                input=body,
                stdout=subprocess.PIPE,
                env=self.cgi_env(path_info, query, body),
                timeout=CLIENT_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            return self.send_error(504, "git http-backend timed out")
        answer = parse_cgi(done.stdout)
        if answer is None:
            return self.send_error(502, f"git http-backend: exit {done.returncode}, no CGI answer")
        status, headers, payload = answer
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def send_bytes(self, count):
        try:
            n = int(count)
        except ValueError:
            return self.send_error(400, "bad count")
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        if self.command == "HEAD":
            return
        chunk = b"x" * CHUNK
        while n > 0:
            self.wfile.write(chunk[: min(n, CHUNK)])
            n -= CHUNK

    def send_static(self, path):
        root = os.path.realpath(ARGS.www)
        full = os.path.realpath(os.path.join(root, path.lstrip("/")))
        if not full.startswith(root + "/") or not os.path.isfile(full):
            return self.send_error(404)
        with open(full, "rb") as f:
            self.send_body(f.read(), "application/octet-stream")

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = handle_any


class WebServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def server_bind(self):
        # HTTPServer's own would look up the address's name (getfqdn): no
        # lookup may leave the internet namespace.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "internet.test", self.server_address[1]

    def finish_request(self, request, client_address):
        request.settimeout(CLIENT_TIMEOUT)
        super().finish_request(request, client_address)


class TlsServer(WebServer):
    context = None

    def finish_request(self, request, client_address):
        # The handshake is done here, in the connection's own thread, so a
        # slow client does not stall the accept loop.
        request.settimeout(CLIENT_TIMEOUT)
        try:
            request = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            log("http.log", f"https TLS-FAILED {e.__class__.__name__} from {client_address[0]}")
            return
        self.RequestHandlerClass(request, client_address, self)


class Secure(Web):
    scheme = "https"


def sse(event, data):
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def anthropic_stream(deltas, output, asked):
    yield sse("message_start", {"type": "message_start", "message": {"usage": {
        "input_tokens": 500, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 200,
        "output_tokens": 1}}})
    for text in deltas:
        yield sse("content_block_delta", {"type": "content_block_delta",
                                          "delta": {"type": "text_delta", "text": text}})
    yield sse("message_delta", {"type": "message_delta", "usage": {"output_tokens": output}})
    yield sse("message_stop", {"type": "message_stop"})


def chat_stream(deltas, output, asked):
    for text in deltas:
        yield "data: " + json.dumps({"choices": [{"delta": {"content": text}}]}) + "\n\n"
    if (asked.get("stream_options") or {}).get("include_usage"):
        yield "data: " + json.dumps({"choices": [], "usage": {
            "prompt_tokens": 1000, "completion_tokens": output,
            "prompt_tokens_details": {"cached_tokens": 200}}}) + "\n\n"
    yield "data: [DONE]\n\n"


def responses_stream(deltas, output, asked):
    for text in deltas:
        yield sse("response.output_text.delta", {"type": "response.output_text.delta", "delta": text})
    yield sse("response.completed", {"type": "response.completed", "response": {"usage": {
        "input_tokens": 1000, "output_tokens": output, "input_tokens_details": {"cached_tokens": 200}}}})


PROVIDER_JSON = {
    "/v1/messages": lambda output: {"type": "message", "content": [{"type": "text", "text": "hi"}],
                                    "usage": {"input_tokens": 500, "cache_creation_input_tokens": 300,
                                              "cache_read_input_tokens": 200, "output_tokens": output}},
    "/v1/chat/completions": lambda output: {"choices": [{"message": {"content": "hi"}}],
                                            "usage": {"prompt_tokens": 1000, "completion_tokens": output,
                                                      "prompt_tokens_details": {"cached_tokens": 200}}},
    "/v1/responses": lambda output: {"output": [], "usage": {"input_tokens": 1000, "output_tokens": output,
                                                             "input_tokens_details": {"cached_tokens": 200}}},
}
PROVIDER_STREAM = {
    "/v1/messages": anthropic_stream,
    "/v1/chat/completions": chat_stream,
    "/v1/responses": responses_stream,
}
PROVIDER_PATHS = set(PROVIDER_JSON)


# ---------------------------------------------------------------- TCP, UDP


def line_handler(port, text):
    class Line(socketserver.BaseRequestHandler):
        def handle(self):
            log("connections.log", f"tcp {port} from {self.client_address[0]}")
            self.request.sendall(text)

    return Line


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        log("connections.log", f"udp 9999 from {self.client_address[0]}")
        sock.sendto(data, self.client_address)


# ---------------------------------------------------------------- main


def server(base, family, addr, port, handler):
    class S(base):
        address_family = family
        allow_reuse_address = True
        daemon_threads = True

    s = S((addr, port), handler)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    return s


def serve_all():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(ARGS.cert, ARGS.key)
    TlsServer.context = ctx
    udp, tcp = socketserver.ThreadingUDPServer, socketserver.ThreadingTCPServer
    for family, addr in ((socket.AF_INET, ARGS.v4), (socket.AF_INET6, ARGS.v6)):
        server(udp, family, addr, 53, DnsUdp)
        server(tcp, family, addr, 53, DnsTcp)
        server(WebServer, family, addr, 80, Web)
        server(TlsServer, family, addr, 443, Secure)
        server(tcp, family, addr, 22, line_handler(22, b"SSH-2.0-internet.test\r\n"))
        server(tcp, family, addr, 8080, line_handler(8080, b"hello from 8080\n"))
        server(udp, family, addr, 9999, Echo)


def main():
    global ARGS, ZONE
    p = argparse.ArgumentParser()
    for name in ("--v4", "--v6", "--dir", "--cert", "--key", "--www", "--zone", "--git-root"):
        p.add_argument(name, required=True)
    p.add_argument("--parent", type=int, required=True)
    ARGS = p.parse_args()
    with open(ARGS.zone) as f:
        ZONE = {name.lower(): recs for name, recs in json.load(f).items()}
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    serve_all()
    # Every socket is bound and listening: the Rust side may probe.
    open(os.path.join(ARGS.dir, "ready"), "w").close()
    # Outlive no test: if the test process dies without dropping the
    # Internet, this process is re-parented and ends itself.
    while os.getppid() == ARGS.parent:
        time.sleep(0.5)
    sys.exit(0)


if __name__ == "__main__":
    main()
