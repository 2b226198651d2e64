"""What a request must show before its body is read: the API key when the server has one (OpenAI's 401), a
JSON content type (415: a `text/plain` or type-less POST is what any web page can make a visitor's browser
send without a CORS preflight), and a body within the size limit (413, checked on Content-Length and again
while reading, for chunked bodies)."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from fastapi import Request as HTTPRequest

from zoo.serving.protocol import APIError

DEFAULT_MAX_BODY_MB = 8.0  # a 128k-token prompt is well under it; more is refused before it is read
JSON_TYPE = "application/json"


def key_check(api_key: str) -> Callable[[HTTPRequest], Awaitable[None]]:
    """A FastAPI dependency: the request's `Authorization: Bearer <key>` must be `api_key`, else a 401."""
    expected = api_key.encode("utf-8")

    async def check(request: HTTPRequest) -> None:
        header = request.headers.get("authorization")
        if header is None:
            raise APIError(401, "You didn't provide an API key. Send it as 'Authorization: Bearer <key>' "
                                "(this server was started with api_key= or ZOO_API_KEY).",
                           code="invalid_api_key")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode("utf-8"), expected):
            raise APIError(401, "Incorrect API key provided. Send the server's key as "
                                "'Authorization: Bearer <key>'.", code="invalid_api_key")

    return check


async def read_body(request: HTTPRequest, max_body_mb: float) -> bytes:
    """The body of a JSON POST of at most `max_body_mb` MiB; 415 for another content type, 413 past it."""
    limit = int(max_body_mb * 2**20)
    given = request.headers.get("content-type")
    if given is None or given.split(";", 1)[0].strip().lower() != JSON_TYPE:
        raise APIError(415, f"Unsupported Content-Type {given!r}: send the request body as JSON with "
                            f"'Content-Type: {JSON_TYPE}'.", code="unsupported_media_type")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        _too_large(int(length), limit, max_body_mb)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            _too_large(size, limit, max_body_mb)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(size: int, limit: int, max_body_mb: float) -> None:
    raise APIError(413, f"The request body is {size:,} bytes or more; this server accepts at most {limit:,} "
                        f"(max_body_mb={max_body_mb:g}).", code="request_too_large")
