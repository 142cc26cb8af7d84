#!/usr/bin/env python3
"""A minimal DNS client, for tests that must ask a given server directly
(without the system resolver): dns_query.py SERVER NAME [A|AAAA] [--tcp]

Prints the rcode on the first line, then one "TYPE ADDRESS" line per answer.
Exits 0 when a reply came, 2 when none came within the timeout."""

import random
import socket
import struct
import sys

TYPES = {"A": 1, "AAAA": 28}
NAMES = {v: k for k, v in TYPES.items()}
RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 5: "REFUSED"}
TIMEOUT = 2


def query(name, qtype):
    qid = random.randrange(1 << 16)
    head = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    qname = b"".join(bytes([len(l)]) + l.encode() for l in name.rstrip(".").split("."))
    return qid, head + qname + b"\0" + struct.pack("!HH", qtype, 1)


def skip_name(msg, pos):
    # Bounded by the message's length: every step moves forward.
    while pos < len(msg):
        n = msg[pos]
        if n & 0xC0:
            return pos + 2
        pos += 1 + n
        if n == 0:
            return pos
    raise ValueError("truncated name")


def parse(msg, qid):
    rid, flags, qd, an = struct.unpack("!HHHH", msg[:8])
    if rid != qid:
        raise ValueError("wrong id")
    lines = [RCODES.get(flags & 0xF, str(flags & 0xF))]
    pos = 12
    for _ in range(qd):
        pos = skip_name(msg, pos) + 4
    for _ in range(an):
        pos = skip_name(msg, pos)
        rtype, _, _, rdlen = struct.unpack("!HHIH", msg[pos : pos + 10])
        pos += 10
        rdata = msg[pos : pos + rdlen]
        pos += rdlen
        if rtype in NAMES:
            family = socket.AF_INET if rtype == 1 else socket.AF_INET6
            lines.append(f"{NAMES[rtype]} {socket.inet_ntop(family, rdata)}")
    return lines


def ask(server, msg, tcp):
    family = socket.AF_INET6 if ":" in server else socket.AF_INET
    kind = socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM
    with socket.socket(family, kind) as s:
        s.settimeout(TIMEOUT)
        s.connect((server, 53))
        if not tcp:
            s.send(msg)
            return s.recv(4096)
        s.sendall(struct.pack("!H", len(msg)) + msg)
        f = s.makefile("rb")
        (n,) = struct.unpack("!H", f.read(2))
        return f.read(n)


def main():
    args = [a for a in sys.argv[1:] if a != "--tcp"]
    server, name = args[0], args[1]
    qtype = TYPES[args[2]] if len(args) > 2 else 1
    qid, msg = query(name, qtype)
    try:
        reply = ask(server, msg, "--tcp" in sys.argv)
    except OSError as e:
        print(f"no reply: {e}")
        sys.exit(2)
    print("\n".join(parse(reply, qid)))


if __name__ == "__main__":
    main()
