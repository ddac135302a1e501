"""A Dask scheduler's address, checked before any connection is tried.

`distributed.Client("notanaddress")` waits out its whole timeout, then leaves
a traceback from its finaliser; a mistyped address should fail at once and
say what an address looks like.
"""

from __future__ import annotations

import socket
import urllib.parse

from kernelevo.errors import ConfigError

# Schemes Dask's comms use with a host and port; inproc:// addresses have neither.
HOST_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")
EXAMPLE = "tcp://HOST:8786 (the address `dask scheduler` prints)"


def check_address(address: str) -> str:
    """`address` if it names a scheduler as scheme://host:port (or host:port); else ConfigError."""
    scheme, host, port = _parts(address)
    if scheme == "inproc":
        return address
    if scheme not in HOST_SCHEMES or not host or port is None:
        raise ConfigError(f"cluster address {address!r} is not a scheduler's address: "
                          f"write {EXAMPLE}")
    return address


def resolve_host(address: str) -> None:
    """ConfigError at once when the address's host name does not resolve."""
    scheme, host, port = _parts(check_address(address))
    if scheme == "inproc":
        return
    try:
        socket.getaddrinfo(host, port)
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigError(f"cluster address {address!r}: cannot resolve the host {host!r} "
                          f"({exc}): check the name, or give the scheduler's IP address, "
                          f"e.g. {EXAMPLE}") from None


def _parts(address: str) -> tuple[str, str, int | None]:
    text = address.strip()
    if "://" not in text:
        text = "tcp://" + text  # Dask's default protocol
    parts = urllib.parse.urlsplit(text)
    try:
        port = parts.port
    except ValueError:  # a port that is not a number, or out of range
        port = None
    return parts.scheme, parts.hostname or "", port
