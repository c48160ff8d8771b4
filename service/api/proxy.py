"""TLS terminated in front of the service: trust ``X-Forwarded-Proto`` from the proxies
named in ``RETARGET_FORWARDED_ALLOW_IPS`` only (addresses, networks, or ``*``), so the
request's scheme is https behind them (dashboard cookies become ``Secure``) and nobody
else can claim it. Nothing is trusted by default."""

from __future__ import annotations

import ipaddress

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send


class TrustedProxyHeaders:
    def __init__(self, app: ASGIApp, allow: str) -> None:
        self.app = app
        entries = [e.strip() for e in allow.split(",") if e.strip()]
        self.any = "*" in entries
        self.networks = []
        for entry in entries:
            if entry != "*":
                self.networks.append(ipaddress.ip_network(entry, strict=False))

    def trusted(self, client: tuple[str, int] | None) -> bool:
        if self.any:
            return True
        if client is None:
            return False
        try:
            address = ipaddress.ip_address(client[0])
        except ValueError:
            return False
        return any(address.version == n.version and address in n for n in self.networks)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.trusted(scope.get("client")):
            proto = Headers(scope=scope).get("x-forwarded-proto", "")
            first = proto.split(",")[0].strip().lower()
            if first in ("http", "https"):
                scope = {**scope, "scheme": first}
        await self.app(scope, receive, send)
