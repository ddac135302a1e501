"""Addresses checked before they are used: a Dask scheduler's, and a host to listen on.

`distributed.Client("notanaddress")` waits out its whole timeout, then leaves
a traceback from its finaliser; a mistyped address should fail at once and
say what an address looks like. A host that is no address must be told as
such before a server asks for a token to guard it, and a failed bind by its
cause (the port taken, the address not this machine's).
"""

from __future__ import annotations

import errno
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


LISTEN_EXAMPLE = "127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"


def check_listen_host(host: str) -> str:
    """`host` if it is an address or a name that resolves; else ConfigError naming --host."""
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise ConfigError(f"--host {host!r} is no valid address ({reason}): give an address "
                          f"of this machine, e.g. {LISTEN_EXAMPLE}") from None
    return host


def bind_error(host: str, port: int, exc: OSError) -> ConfigError:
    """Why a server could not listen on host:port, and what to give instead."""
    if exc.errno == errno.EADDRINUSE:
        return ConfigError(f"port {port} on {host} is in use by another program: pick another "
                           "--port (0: any free one)")
    if exc.errno == errno.EADDRNOTAVAIL:
        return ConfigError(f"--host {host} is no address of this machine: give one of its "
                           f"addresses, e.g. {LISTEN_EXAMPLE}")
    if exc.errno == errno.EACCES:
        return ConfigError(f"port {port} needs privileges to listen on: pick a --port above "
                           "1023 (0: any free one)")
    return ConfigError(f"cannot listen on {host}:{port} ({exc.strerror or exc}): check --host "
                       "and --port")
