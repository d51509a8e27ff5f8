"""How `tools.serve` meets the network: uvicorn's h11 protocol with a deadline for a
request's headers and one for its body (408 past either), and the check that refuses a --host
that is not loopback unless --expose says it is meant.
"""
import click

HEADER_TIMEOUT, BODY_TIMEOUT, KEEP_ALIVE_TIMEOUT = 10.0, 30.0, 5
WILDCARDS = ("", "0", "0.0.0.0", "::", "[::]", "*")


def timed_protocol(header_timeout: float, body_timeout: float):
    """uvicorn's h11 protocol with a deadline for a request's headers (from the connection's
    start or a new request's first byte) and one for its body (from the end of the headers):
    past either, the client gets 408 and the connection is closed."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11Protocol(H11Protocol):
        def connection_made(self, transport):
            super().connection_made(transport)
            self._header_timer = self._body_timer = self._timed_cycle = None
            self._start_header_timer()

        def _start_header_timer(self):
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_timeout, self._timed_out,
                                                          "headers", header_timeout)

        def _cancel(self, name):
            timer = getattr(self, name, None)
            if timer is not None:
                timer.cancel()
                setattr(self, name, None)

        def data_received(self, data):
            if self.cycle is None or self.cycle.response_complete:
                self._start_header_timer()  # a new request's first bytes
            super().data_received(data)
            self._rearm()

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
                    self._body_timer = self.loop.call_later(body_timeout, self._timed_out,
                                                            "body", body_timeout)
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
                body = (f'{{"detail": "request {what} not received within {seconds:g} s"}}'
                        ).encode()
                self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: "
                                     b"application/json\r\nconnection: close\r\n"
                                     b"content-length: " + str(len(body)).encode() +
                                     b"\r\n\r\n" + body)
            self.transport.close()

    return TimedH11Protocol


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
