"""Callback URLs: which ones a deployment may name, how they are shown, how they are called.

A callback is a request the service makes on a caller's behalf, so it must not reach
what the caller cannot (server-side request forgery):

- at creation a URL whose host is a literal internal address is refused, in any
  notation: IPv4 as one number (``2130706433``), hex (``0x7f000001``), octal
  (``0177.0.0.1``) or short (``127.1``), IPv6 with embedded IPv4 (``[::ffff:7f00:1]``),
  and the names ``localhost`` / ``*.localhost``. Internal means loopback, private,
  link-local (the cloud metadata service, 169.254.169.254), multicast, reserved,
  unspecified or otherwise not globally routable;
- at delivery the name is resolved again, every address it resolves to must pass the
  same rule, and the connection goes to the address checked (pinned: a second lookup
  cannot swap it), with the URL's host in ``Host`` and TLS verified for that name;
- redirects are never followed (only the status line is read) and timeouts are short;
- what a caller sees of an attempt is "delivered (HTTP n)" or "failed (...)", never an
  error text that would map the internal network.

The operator may re-admit internal targets with ``RETARGET_CALLBACK_ALLOW``: host names
(exact) and CIDR networks. URLs are stored whole (the receiver needs their tokens) and
shown only as ``scheme://host[:port]/…`` (``redact_url``).
"""

from __future__ import annotations

import base64
import ipaddress
import re
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

from service.errors import InvalidInput

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
#: host, port -> the addresses it resolves to (the system resolver by default)
Resolver = Callable[[str, int], list[str]]

MAX_URL = 2000
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_NUMBER = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
MAX_STATUS_LINE = 1024


class CallbackRefused(Exception):
    """The target may not be called (its address is internal and not allowed)."""


@dataclass(frozen=True)
class AllowList:
    """Internal targets the operator admits: exact host names and address networks."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, text: str) -> AllowList:
        hosts: set[str] = set()
        networks: list[Network] = []
        for raw in text.split(","):
            entry = raw.strip().lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                hosts.add(entry.rstrip("."))
        return cls(frozenset(hosts), tuple(networks))

    def admits_host(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.hosts

    def admits_address(self, address: IPAddress) -> bool:
        return any(address.version == n.version and address in n for n in self.networks)


def parse_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address of a host written the way resolvers and browsers read numbers
    (inet_aton, the URL standard's IPv4 parser): 1 to 4 dot-separated parts, each
    decimal, ``0x`` hex or ``0``-led octal, the last part filling the remaining bytes.
    None when the host is not a number of that form."""
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or not all(_NUMBER.match(p) for p in parts):
        return None
    values = []
    for part in parts:
        if part.startswith("0x"):
            values.append(int(part[2:] or "0", 16))
        elif len(part) > 1 and part.startswith("0"):
            if any(c in "89" for c in part):
                return None
            values.append(int(part, 8))
        else:
            values.append(int(part))
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    number = last
    for i, v in enumerate(head):
        number += v << (8 * (3 - i))
    return ipaddress.IPv4Address(number)


def host_address(host: str) -> IPAddress | None:
    """The address a literal host names (any notation); None for a host name.

    Raises ``InvalidInput`` for a host that is neither an address nor a valid name."""
    h = host.lower()
    if h.endswith(".") and not h.endswith(".."):
        h = h[:-1]
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if ":" in h:
        try:
            return ipaddress.IPv6Address(unquote(h))
        except ValueError as exc:
            raise InvalidInput(f"the callback host {host!r} is not a valid address") from exc
    v4 = parse_ipv4(h)
    if v4 is not None:
        return v4
    labels = h.split(".")
    if len(h) > 253 or not all(_LABEL.match(label) for label in labels):
        raise InvalidInput(f"the callback host {host!r} is not a valid host name")
    if _NUMBER.match(labels[-1]):  # what a resolver would read as a (bad) number
        raise InvalidInput(f"the callback host {host!r} is not a valid address")
    return None


def internal_reason(address: IPAddress) -> str | None:
    """Why an address is internal (None: globally routable), embedded IPv4 included."""
    if isinstance(address, ipaddress.IPv6Address):
        teredo = address.teredo
        for inner in (address.ipv4_mapped, address.sixtofour, teredo[1] if teredo else None):
            if inner is not None and (reason := internal_reason(inner)):
                return reason
    checks = (
        ("loopback", address.is_loopback),
        ("unspecified", address.is_unspecified),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
        ("not globally routable", not address.is_global),
    )
    return next((name for name, hit in checks if hit), None)


def _is_local_name(host: str) -> bool:
    h = host.lower().rstrip(".")
    return h == "localhost" or h.endswith(".localhost")


def check_callback_url(url: str, allow: AllowList) -> None:
    """Refuse (``InvalidInput``) a URL that is malformed or names an internal host
    literally. Names are resolved at delivery (``resolve_target``), not here."""
    if (
        len(url) > MAX_URL
        or not url.isascii()
        or any(ord(c) <= 0x20 or ord(c) == 0x7F or c == "\\" for c in url)
    ):
        raise InvalidInput(
            "the callback URL must be ASCII without spaces, control characters or backslashes"
        )
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise InvalidInput("the callback URL does not parse") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput("the callback URL must be http(s)://host/...")
    try:
        _ = parts.port
    except ValueError as exc:
        raise InvalidInput("the callback URL has an invalid port") from exc
    host = parts.hostname
    if allow.admits_host(host):
        return
    if _is_local_name(host):
        raise InvalidInput(
            f"the callback host {host!r} is this machine; RETARGET_CALLBACK_ALLOW admits it"
        )
    address = host_address(host)
    if address is not None:
        _check_address(host, address, allow)


def _check_address(host: str, address: IPAddress, allow: AllowList) -> None:
    reason = internal_reason(address)
    if reason and not allow.admits_address(address):
        raise InvalidInput(
            f"the callback host {host!r} is a {reason} address ({address}); "
            "RETARGET_CALLBACK_ALLOW admits internal targets"
        )


def redact_url(url: str | None) -> str | None:
    """What may be shown of a callback URL: scheme, host and port. User info, path,
    query and fragment may all carry credentials (a token in the path is common)."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    if port:
        host = f"{host}:{port}"
    rest = "/…" if (parts.path not in ("", "/") or parts.query or parts.fragment) else "/"
    return urlunsplit((parts.scheme, host, "", "", "")) + rest


def system_resolver(host: str, port: int) -> list[str]:
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


@dataclass(frozen=True)
class Target:
    """Where a callback goes: the URL's parts and the one address checked and pinned."""

    scheme: str
    host: str
    port: int
    request_target: str
    address: str
    userinfo: str | None = None

    @property
    def host_header(self) -> str:
        name = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return name if self.port == default else f"{name}:{self.port}"


def resolve_target(url: str, allow: AllowList, resolve: Resolver | None = None) -> Target:
    """Check the URL again, resolve its host, and pin an address that passes.

    Raises ``InvalidInput`` for a URL refused outright and ``CallbackRefused`` when a
    name resolves to an internal address (any of them: a name that mixes public and
    internal answers is refused) or to nothing. ``resolve``: the system resolver by
    default (tests pass a stub: no lookup leaves the machine)."""
    check_callback_url(url, allow)
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    literal = host_address(host)
    if literal is not None:
        addresses: list[IPAddress] = [literal]
    else:
        try:
            found = (resolve or system_resolver)(host, port)
        except OSError as exc:
            raise CallbackRefused(f"{host!r} does not resolve") from exc
        addresses = [ipaddress.ip_address(a.split("%")[0]) for a in found]
        if not addresses:
            raise CallbackRefused(f"{host!r} does not resolve")
        if not allow.admits_host(host):
            for address in addresses:
                reason = internal_reason(address)
                if reason and not allow.admits_address(address):
                    raise CallbackRefused(f"{host!r} resolves to a {reason} address")
    path = parts.path or "/"
    request_target = f"{path}?{parts.query}" if parts.query else path
    userinfo = parts.netloc.rpartition("@")[0] or None
    return Target(parts.scheme, host, port, request_target, str(addresses[0]), userinfo)


def post_status(
    target: Target,
    body: bytes,
    headers: dict[str, str],
    *,
    connect_timeout_s: float,
    read_timeout_s: float,
) -> int:
    """POST ``body`` to the pinned address and return the status code.

    Reads only the status line (no redirect is followed, no body is read), within
    ``connect_timeout_s`` for the connection and TLS handshake and ``read_timeout_s``
    for everything after: a receiver that trickles bytes cannot hold the sender."""
    lines = [
        f"POST {target.request_target} HTTP/1.1",
        f"Host: {target.host_header}",
        "User-Agent: retarget-callback",
        "Connection: close",
        f"Content-Length: {len(body)}",
    ]
    if target.userinfo:
        token = base64.b64encode(unquote(target.userinfo).encode()).decode()
        lines.append(f"Authorization: Basic {token}")
    lines += [f"{k}: {v}" for k, v in headers.items()]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    sock = socket.create_connection((target.address, target.port), timeout=connect_timeout_s)
    try:
        if target.scheme == "https":
            context = ssl.create_default_context()
            sock = context.wrap_socket(sock, server_hostname=target.host)
        deadline = time.monotonic() + read_timeout_s
        sock.settimeout(read_timeout_s)
        sock.sendall(head + body)
        line = b""
        while b"\r\n" not in line and len(line) < MAX_STATUS_LINE:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no status line in time")
            sock.settimeout(left)
            chunk = sock.recv(MAX_STATUS_LINE)
            if not chunk:
                break
            line += chunk
    finally:
        sock.close()
    fields = line.split(b"\r\n", 1)[0].split()
    if len(fields) < 2 or not fields[0].startswith(b"HTTP/") or not fields[1].isdigit():
        raise ValueError("not an HTTP response")
    return int(fields[1])
