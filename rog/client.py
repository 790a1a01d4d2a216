"""A small HTTP client for the Memories REST API, used by the `rog` CLI.

Never evaluates, executes or shell-expands anything it sends or receives: bodies go out as JSON strings
and come back as parsed JSON.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx


class ApiError(Exception):
    """The API answered with an error status. `body` is the SPEC §2 error object (or a synthesised one)."""

    def __init__(self, status: int, body: dict[str, Any]):
        self.status = status
        self.body = body
        super().__init__(f"HTTP {status}")


class NetworkError(Exception):
    """The API could not be reached (connection refused, DNS, timeout)."""


def _error_body(response: httpx.Response) -> dict[str, Any]:
    """The SPEC §2 error object of a failed answer, or one synthesised from its status and text."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "error" in body:
        return body
    return {
        "type": "error",
        "error": {"type": "api_error", "message": f"HTTP {response.status_code}: {response.text[:200]}"},
        "request_id": response.headers.get("request-id"),
    }


@dataclass
class Client:
    """Calls `/api/v1/...` under `base_url` with `Authorization: Bearer <token>`."""

    base_url: str
    token: str | None
    timeout: float = 30.0

    def __post_init__(self) -> None:
        headers = {"Accept": "application/json", "User-Agent": "rog/2.0.0"}
        if self.token:
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
    ) -> dict[str, Any]:
        """Send one request; return the parsed JSON body of a 2xx answer.

        Raises ApiError for 4xx/5xx answers and NetworkError when the server cannot be reached.
        """
        params = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = self._http.request(
                method, path.lstrip("/"), params=params, json=json, content=content, headers=headers
            )
        except httpx.TransportError as exc:
            raise NetworkError(f"{type(exc).__name__}: {exc}") from None
        if response.is_success:
            try:
                body = response.json()
            except ValueError:
                body = None
            return body if isinstance(body, dict) else {"data": body}
        raise ApiError(response.status_code, _error_body(response))

    def send_bytes(
        self, method: str, path: str, content: bytes, *, content_type: str, params: dict | None = None
    ) -> dict[str, Any]:
        """Like `request`, with a raw body (`content`) of media type `content_type` instead of JSON."""
        return self.request(method, path, params=params, content=content, headers={"Content-Type": content_type})

    @contextlib.contextmanager
    def stream(self, path: str, *, params: dict | None = None, accept: str = "*/*") -> Iterator[httpx.Response]:
        """GET `path` as a stream; yields the response once its status is 2xx (ApiError / NetworkError else)."""
        params = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            with self._http.stream("GET", path.lstrip("/"), params=params, headers={"Accept": accept}) as response:
                if not response.is_success:
                    response.read()
                    raise ApiError(response.status_code, _error_body(response))
                yield response
        except httpx.TransportError as exc:
            raise NetworkError(f"{type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        self._http.close()
