"""A small HTTP client for the Memories REST API, used by the `rog` CLI.

Never evaluates, executes or shell-expands anything it sends or receives: bodies go out as JSON strings
and come back as parsed JSON.
"""

from __future__ import annotations

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

    def request(self, method: str, path: str, *, params: dict | None = None, json: Any = None) -> dict[str, Any]:
        """Send one request; return the parsed JSON body of a 2xx answer.

        Raises ApiError for 4xx/5xx answers and NetworkError when the server cannot be reached.
        """
        params = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = self._http.request(method, path.lstrip("/"), params=params, json=json)
        except httpx.TransportError as exc:
            raise NetworkError(f"{type(exc).__name__}: {exc}") from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.is_success:
            return body if isinstance(body, dict) else {"data": body}
        if not isinstance(body, dict) or "error" not in body:
            body = {
                "type": "error",
                "error": {"type": "api_error", "message": f"HTTP {response.status_code}: {response.text[:200]}"},
                "request_id": response.headers.get("request-id"),
            }
        raise ApiError(response.status_code, body)

    def close(self) -> None:
        self._http.close()
