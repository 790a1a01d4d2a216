"""A small HTTP client for the Memories REST API, used by the `rog` CLI.

Never evaluates, executes or shell-expands anything it sends or receives: bodies go out as JSON strings
and come back as parsed JSON.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from config.text import quoted

RETRY_STATUSES = (429, 503)
RETRY_AFTER_CAP_S = 5.0
TOKEN_MASK = "<your token>"  # noqa: S105 - a placeholder for the caller's token in any answer rog prints


class ApiError(Exception):
    """The API answered with an error status. `body` is the SPEC §2 error object (or a synthesised one)."""

    def __init__(self, status: int, body: dict[str, Any]):
        self.status = status
        self.body = body
        super().__init__(f"HTTP {status}")


class NetworkError(Exception):
    """The API could not be reached (connection refused, DNS, timeout)."""


def header_safe(value: str) -> bool:
    """Whether `value` can travel as an HTTP header value unchanged: visible ASCII only (no spaces, which
    HTTP trims at the ends, no control characters, nothing httpx would refuse or re-encode)."""
    return bool(value) and all("!" <= ch <= "~" for ch in value)


def new_idempotency_key() -> str:
    """A fresh `Idempotency-Key` value (``rog-`` + 32 hex digits)."""
    return "rog-" + uuid.uuid4().hex


def _masked_text(response: httpx.Response, token: str | None) -> str:
    """The answer's text with the caller's token replaced: a proxy or a server that echoes the request's
    `Authorization` header back (an error page, a debug body) must not make rog print the token."""
    text = response.text
    return text.replace(token, TOKEN_MASK) if token and token in text else text


def _masked(value: Any, token: str | None) -> Any:
    """`value` (parsed JSON) with the token replaced in every string, keys included: a server can send it
    JSON-escaped (``\\u006d…``), which the raw text does not show (a tester). Accidental echoes only: a
    server that encodes the token otherwise (percent, base64) can always print it through rog."""
    if not token:
        return value
    if isinstance(value, str):
        return value.replace(token, TOKEN_MASK)
    if isinstance(value, list):
        return [_masked(item, token) for item in value]
    if isinstance(value, dict):
        return {_masked(key, token): _masked(item, token) for key, item in value.items()}
    return value


def _error_body(response: httpx.Response, token: str | None = None) -> dict[str, Any]:
    """The SPEC §2 error object of a failed answer, or one synthesised from its status and text (a
    redirect names where it pointed: rog never follows one). The caller's token is masked in both."""
    text = _masked_text(response, token)
    try:
        body = _masked(json.loads(text), token)
    except ValueError:
        body = None
    if isinstance(body, dict) and "error" in body:
        return body
    message = f"HTTP {response.status_code}: {text[:200]}"
    if response.is_redirect:
        location = response.headers.get("location", "")
        if token and token in location:
            location = location.replace(token, TOKEN_MASK)
        message = (
            f"HTTP {response.status_code}: the server redirects to {quoted(location, 200)}; rog does not follow "
            "redirects — is --api-url / ROG_API_URL the server's root (http or https, host and port)?"
        )
    return {
        "type": "error",
        "error": {"type": "api_error", "message": message},
        "request_id": _masked(response.headers.get("request-id"), token),
    }


@dataclass
class Client:
    """Calls `/api/v1/...` under `base_url` with `Authorization: Bearer <token>`.

    Every write (any method but GET/HEAD) carries an `Idempotency-Key` header (SPEC §2); the server
    uses it as a note's `client_nonce`. A request that is safe to repeat — a read, or a write with a key
    the caller chose — is retried up to `retries` times after a network failure or a 429/503, waiting
    `Retry-After` seconds (at most 5) or 0.5 s, 1 s, … ; the same key goes with every attempt.
    """

    base_url: str
    token: str | None
    timeout: float = 30.0
    retries: int = 2

    def __post_init__(self) -> None:
        """Raises ValueError — never naming the token — for a token with anything but visible ASCII (a
        trailing CR or newline from a file, a space), and for a base URL httpx cannot parse."""
        headers = {"Accept": "application/json", "User-Agent": "rog/2.0.0"}
        if self.token:
            if not header_safe(self.token):
                raise ValueError(
                    "the token holds a space, a line break or another character no token has "
                    "(a trailing CR or newline from a file?)"
                )
            headers["Authorization"] = f"Bearer {self.token}"
        self._http = httpx.Client(
            base_url=self.base_url.rstrip("/") + "/api/v1/", headers=headers, timeout=self.timeout
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict | None = None,
        json: Any = None,
        content: bytes | None = None,
        headers: dict | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Send one request (retried as the class docstring says); return the parsed JSON of a 2xx answer.

        `json` or `content` (raw bytes, with its Content-Type in `headers`) is the body.
        `idempotency_key`: the write's key (a fresh one when None); one that cannot travel as a header
        value (`header_safe`) is not sent as one — the caller puts it in the body (a note's
        `client_nonce`). Raises ApiError for 4xx/5xx answers and NetworkError when the server cannot be
        reached.
        """
        params = {k: v for k, v in (params or {}).items() if v is not None}
        method = method.upper()
        headers = dict(headers or {})
        repeatable = method in ("GET", "HEAD") or idempotency_key is not None
        if method not in ("GET", "HEAD"):
            key = idempotency_key if idempotency_key is not None else new_idempotency_key()
            if header_safe(key):
                headers["Idempotency-Key"] = key
        attempts = 1 + (self.retries if repeatable else 0)
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = self._http.request(
                    method, path.lstrip("/"), params=params, json=json, content=content, headers=headers
                )
            except httpx.LocalProtocolError:
                # the request could not even be written; the exception's text holds the header values
                raise NetworkError(
                    "LocalProtocolError: the request could not be written (a header is invalid)"
                ) from None
            except httpx.TransportError as exc:
                if last:
                    raise NetworkError(f"{type(exc).__name__}: {exc}") from None
                time.sleep(0.5 * 2**attempt)
                continue
            if response.status_code in RETRY_STATUSES and not last:
                time.sleep(_retry_delay(response, attempt))
                continue
            return self._result(response)
        raise AssertionError("unreachable")

    def _result(self, response: httpx.Response) -> dict[str, Any]:
        """The parsed JSON of a 2xx answer (a JSON value other than an object comes as ``{"data": value}``),
        the caller's token masked. Raises ApiError for an error status, and ApiError 502 for a 2xx answer
        that is not JSON at all (a proxy's page, another server at this URL): rog must not report success
        for a write it cannot see stored (a tester: such an answer printed ``{"data": null}``, exit 0)."""
        if not response.is_success:
            raise ApiError(response.status_code, _error_body(response, self.token))
        text = _masked_text(response, self.token)
        try:
            body = json.loads(text)
        except ValueError:
            raise ApiError(
                502,
                {
                    "type": "error",
                    "error": {
                        "type": "api_error",
                        "message": f"HTTP {response.status_code} with a body that is not JSON (a proxy, or another "
                        f"server at --api-url?): {text[:200]}",
                    },
                    "request_id": _masked(response.headers.get("request-id"), self.token),
                },
            ) from None
        body = _masked(body, self.token)
        return body if isinstance(body, dict) else {"data": body}

    def send_bytes(
        self,
        method: str,
        path: str,
        content: bytes,
        *,
        content_type: str,
        params: dict | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Like `request`, with a raw body (`content`) of media type `content_type` instead of JSON."""
        return self.request(
            method,
            path,
            params=params,
            content=content,
            headers={"Content-Type": content_type},
            idempotency_key=idempotency_key,
        )

    @contextlib.contextmanager
    def stream(self, path: str, *, params: dict | None = None, accept: str = "*/*") -> Iterator[httpx.Response]:
        """GET `path` as a stream; yields the response once its status is 2xx and its media type is `accept`
        (when not ``*/*``). Raises ApiError for an error status, ApiError 502 for a 2xx answer of another media
        type (a proxy's HTML page: rog's exit 4, as for a 2xx answer that is not JSON; helper-100), NetworkError
        when the connection fails."""
        params = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            with self._http.stream("GET", path.lstrip("/"), params=params, headers={"Accept": accept}) as response:
                if not response.is_success:
                    response.read()
                    raise ApiError(response.status_code, _error_body(response, self.token))
                media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if accept != "*/*" and media_type != accept:  # a proxy's page: exit 4, as for `_result`
                    head = b""
                    for chunk in response.iter_bytes():  # a bounded look at what came instead
                        head += chunk
                        if len(head) >= 4096:
                            break
                    text = head[:4096].decode("utf-8", "replace")
                    text = (text.replace(self.token, TOKEN_MASK) if self.token else text)[:200]
                    raise ApiError(
                        502,
                        {
                            "type": "error",
                            "error": {
                                "type": "api_error",
                                "message": f"HTTP {response.status_code} with a body that is not {accept} but "
                                f"{media_type or 'untyped'} (a proxy, or another server at --api-url?): {text}",
                            },
                            "request_id": _masked(response.headers.get("request-id"), self.token),
                        },
                    )
                yield response
        except httpx.TransportError as exc:
            raise NetworkError(f"{type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        self._http.close()


def _retry_delay(response: httpx.Response, attempt: int) -> float:
    """Seconds to wait before retrying `response`: its Retry-After (capped), else 0.5 s · 2^attempt."""
    try:
        return min(float(response.headers["retry-after"]), RETRY_AFTER_CAP_S)
    except (KeyError, ValueError):
        return 0.5 * 2**attempt
