#!/usr/bin/env python3
"""Attacks on an opened host, as shell would make them through warden's
proxy (127.0.0.1:3128), printing what came back:

  sni HOST NAME          CONNECT to HOST, then TLS asking for NAME (SNI)
  host HOST NAME         CONNECT and TLS for HOST, a request with Host: NAME
  smuggle HOST P1 P2     two requests (P1, then P2) in one write
  plain HOST             a plain-HTTP request to HOST, with no TLS at all
"""

import socket
import ssl
import sys

PROXY = ("127.0.0.1", 3128)


def tunnel(host):
    s = socket.create_connection(PROXY, timeout=15)
    s.sendall(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n".encode())
    reply = b""
    while b"\r\n\r\n" not in reply:
        chunk = s.recv(4096)
        if not chunk:
            break
        reply += chunk
    if not reply.startswith(b"HTTP/1.1 200"):
        print("tunnel refused:", reply.split(b"\r\n")[0].decode("latin-1"))
        sys.exit(0)
    return s


def tls(s, name):
    # Checks nothing of the certificate: what matters is what warden does.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx.wrap_socket(s, server_hostname=name)


def read_all(s):
    out = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    except (OSError, ssl.SSLError) as e:
        out += f"\n[{e.__class__.__name__}]".encode()
    return out.decode("latin-1")


def main():
    mode, host = sys.argv[1], sys.argv[2]
    if mode == "plain":
        s = socket.create_connection(PROXY, timeout=15)
        s.sendall(f"GET http://{host}/echo/plain-attack HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        print(read_all(s))
        return
    s = tunnel(host)
    if mode == "sni":
        try:
            t = tls(s, sys.argv[3])
        except (OSError, ssl.SSLError) as e:
            print("refused:", e.__class__.__name__, e)
            return
        t.sendall(f"GET /echo/sni HTTP/1.1\r\nHost: {sys.argv[3]}\r\n\r\n".encode())
        answer = read_all(t)
        print(answer if answer.startswith("HTTP/") else f"refused: {answer!r}")
    elif mode == "host":
        t = tls(s, host)
        t.sendall(f"GET /echo/host HTTP/1.1\r\nHost: {sys.argv[3]}\r\n\r\n".encode())
        print(read_all(t))
    elif mode == "smuggle":
        t = tls(s, host)
        first = f"GET {sys.argv[3]} HTTP/1.1\r\nHost: {host}\r\n\r\n"
        second = f"GET {sys.argv[4]} HTTP/1.1\r\nHost: {host}\r\n\r\n"
        t.sendall((first + second).encode())
        print(read_all(t))


if __name__ == "__main__":
    main()
