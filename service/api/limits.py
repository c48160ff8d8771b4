"""A body-size limit enforced while the request streams in, before anything is spooled."""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.problems import problem
from service.errors import PayloadTooLarge


class BodySizeLimit:
    """Refuse bodies over ``limit_for(scope)`` bytes with 413.

    A declared Content-Length over the limit is refused before reading; a
    chunked body is counted as it arrives and cut off once over the limit.
    """

    def __init__(self, app: ASGIApp, limit_for: Callable[[Scope], int]) -> None:
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope)
        for key, value in scope.get("headers", []):
            if key == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > limit:
                    response = problem(
                        413,
                        "payload-too-large",
                        "Payload too large",
                        f"request body of {declared} bytes is over the limit of {limit} bytes",
                        limit=limit,
                    )
                    await response(scope, receive, send)
                    return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise PayloadTooLarge(
                        f"request body is over the limit of {limit} bytes", limit=limit
                    )
            return message

        await self.app(scope, counted, send)
