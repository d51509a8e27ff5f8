"""How `tools.serve` meets the network: uvicorn's h11 protocol with a deadline for a
request's headers and one for its body (408 past either), bytes that cannot begin an HTTP
request refused at once (400, not a 408 once the header deadline has passed), and the check
that refuses a --host that is not loopback unless --expose says it is meant.
"""
import json
import re

import click

WILDCARDS = ("", "0", "0.0.0.0", "::", "[::]", "*")
# What an HTTP/1.1 request's head may hold before its headers end (RFC 9112, as h11 parses
# it): a request line `METHOD SP TARGET SP HTTP/d.d`, then header lines without control bytes
TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]*")
TARGET = re.compile(rb"[\x21-\x7e]*")
VERSION = b"HTTP/0.0\r"
CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
LONGEST_METHOD = 32


def not_a_request(head: bytes) -> str:
    """Why the bytes received so far of a request's head cannot be the start of an HTTP/1.1
    request ("" while they can be): random or binary bytes, a TLS handshake, text that is no
    request line. Checked as the bytes arrive, so such a client gets 400 at once."""
    line, newline, rest = head.partition(b"\n")
    parts = line.split(b" ")
    method = parts[0]
    if len(parts) > 3:
        return "the request line has more than three parts"
    if (not TOKEN.fullmatch(method) or len(method) > LONGEST_METHOD
            or ((len(parts) > 1 or newline) and not method)):
        return "no HTTP method at the start of the request"
    if len(parts) > 1 and (not TARGET.fullmatch(parts[1])
                           or ((len(parts) > 2 or newline) and not parts[1])):
        return "the request target is not printable text"
    if len(parts) > 2:
        version = parts[2]
        if newline and not version.endswith(b"\r"):
            version += b"\r"  # a bare LF ends the line too
        if len(version) > len(VERSION) or any(
                want != got and not (want == 0x30 and 0x30 <= got <= 0x39)
                for want, got in zip(VERSION, version, strict=False)):
            return "the request line does not end in an HTTP version (HTTP/1.1)"
    elif newline:
        return "the request line has no HTTP version"
    if CONTROL.search(rest):
        return "a header holds a control character"
    return ""


def timed_protocol(header_timeout: float, body_timeout: float):
    """uvicorn's h11 protocol with a deadline for a request's headers (from the connection's
    start or a new request's first byte) and one for its body (from the end of the headers):
    past either, the client gets 408 and the connection is closed (Deadlines)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    return type("TimedH11Protocol", (Deadlines, H11Protocol),
                {"header_timeout": header_timeout, "body_timeout": body_timeout})


class Deadlines:
    """What timed_protocol adds to uvicorn's H11Protocol (this mixin comes first in the
    class's bases): the header and body timers, and the 400 for bytes that are no request."""

    header_timeout: float
    body_timeout: float

    def connection_made(self, transport):
        super().connection_made(transport)
        self._header_timer = self._body_timer = self._timed_cycle = None
        self._start_header_timer()

    def _start_header_timer(self):
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._timed_out,
                                                      "headers", self.header_timeout)

    def _cancel(self, name):
        timer = getattr(self, name, None)
        if timer is not None:
            timer.cancel()
            setattr(self, name, None)

    def data_received(self, data):
        if self.cycle is None or self.cycle.response_complete:
            self._start_header_timer()  # a new request's first bytes
        super().data_received(data)
        self._refuse_garbage()
        self._rearm()

    def _refuse_garbage(self):
        """400 at once for a head that cannot become a request (not_a_request), instead of
        waiting for the header deadline (h11 parses a head only once it is complete)."""
        import h11

        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        why = not_a_request(self.conn.trailing_data[0])
        if why:
            self._cancel("_header_timer")
            self._refuse(400, "Bad Request", f"not an HTTP request: {why}")

    def _refuse(self, status, reason, detail):
        body = json.dumps({"detail": detail}).encode()
        self.transport.write(f"HTTP/1.1 {status} {reason}\r\ncontent-type: "
                             f"application/json\r\nconnection: close\r\n"
                             f"content-length: {len(body)}\r\n\r\n".encode() + body)
        self.transport.close()

    def handle_events(self):
        super().handle_events()
        self._rearm()

    def _rearm(self):
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return
        if cycle is not self._timed_cycle:  # this request's headers are in
            self._timed_cycle = cycle
            self._cancel("_header_timer")
            self._cancel("_body_timer")
            if cycle.more_body:
                self._body_timer = self.loop.call_later(self.body_timeout, self._timed_out,
                                                        "body", self.body_timeout)
        elif not cycle.more_body:
            self._cancel("_body_timer")

    def connection_lost(self, exc):
        self._cancel("_header_timer")
        self._cancel("_body_timer")
        super().connection_lost(exc)

    def _timed_out(self, what, seconds):
        if what == "headers":
            self._header_timer = None
        else:
            self._body_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete or (
                not self.cycle.response_started):
            return self._refuse(408, "Request Timeout",
                                f"request {what} not received within {seconds:g} s")
        self.transport.close()


def check_host(host: str, expose: bool) -> str | None:
    """None for a loopback host; otherwise the warning to print (with --expose) or a
    UsageError (without). A wildcard ("", 0, 0.0.0.0, ::) listens on every interface."""
    import ipaddress
    import socket

    if host == "localhost":
        return None
    try:
        if ipaddress.ip_address(host.strip("[]")).is_loopback:
            return None
    except ValueError:
        pass
    if host in WILDCARDS:
        try:
            names = ", ".join(name for _, name in socket.if_nameindex())
        except OSError:
            names = "unknown"
        where = f"every interface ({names})"
    else:
        where = f"{host!r}, not a loopback address"
    if not expose:
        raise click.UsageError(f"--host {host!r} would listen on {where}: anyone who can reach "
                               f"this machine could use the API. Pass --expose as well to mean "
                               f"it, or use --host 127.0.0.1.", )
    return (f"warning: serve listens on {where} (--expose): the API has no authentication; "
            f"anyone who can reach those interfaces can use it.")
