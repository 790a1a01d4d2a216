"""Request-wide middleware: the request id, and screening of hostile input before any view runs (SPEC §2)."""

from __future__ import annotations

import io
from urllib.parse import unquote_to_bytes

from django.conf import settings

from config.errors import error_response, fault_response, is_database_fault, new_request_id
from config.text import first_forbidden_char


class RequestIdMiddleware:
    """Give every request a `request_id` and every response a `Request-Id` header."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.request_id = new_request_id()
        response = self.get_response(request)
        response["Request-Id"] = request.request_id
        return response

    def process_exception(self, request, exception):
        """A database fault in a plain Django view (the back office, the guide) is a 503, not a 500."""
        if is_database_fault(exception):
            return fault_response(request, exception)
        return None


def _bad_bytes(raw: bytes) -> str | None:
    """Return a reason when `raw` is not strict UTF-8 or contains NUL; else None."""
    try:
        text = raw.decode("utf-8")  # strict: rejects encoded surrogates and overlongs
    except UnicodeDecodeError:
        return "is not valid UTF-8"
    problem = first_forbidden_char(text)
    return problem


def _path_problem(request) -> str | None:
    """Why the request's path is not strict UTF-8 without NUL, or None.

    Django hands the path over as text (`PATH_INFO`, WSGI and ASGI alike): decoded from UTF-8, with any
    byte that is not UTF-8 put back as a percent-escape. So the text is encoded as UTF-8 again, then
    percent-decoded, and those bytes are checked (``é`` passes; ``%C3%28`` and ``%00`` do not).
    """
    text = request.META.get("PATH_INFO", "")
    raw = text.encode("utf-8", "surrogatepass")
    return _bad_bytes(raw) or _bad_bytes(unquote_to_bytes(raw))


class HostileInputMiddleware:
    """Reject oversized bodies (413) and NUL / lone surrogates / bad UTF-8 in the path or query (400).

    JSON bodies are screened by `config.parsers.StrictJSONParser`, which names the offending field.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.screen(request) or self.get_response(request)

    def screen(self, request):
        """The refusal of `request` (a 400/413 error response), or None when it passes. Buffers a chunked
        body for the views. The request side of this middleware, also run by the fast lanes."""
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return error_response(request, status=400, type="invalid_request_error", message="Bad Content-Length.")
        if length > settings.MAX_REQUEST_BYTES:
            return error_response(
                request,
                status=413,
                type="request_too_large",
                message=f"Request body is {length} bytes; the limit is {settings.MAX_REQUEST_BYTES} bytes.",
            )
        if "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
            too_large = self._buffer_chunked_body(request)
            if too_large:
                return too_large
        problem = _path_problem(request)
        if problem:
            return error_response(request, status=400, type="invalid_request_error", message=f"URL path {problem}.")
        query = request.META.get("QUERY_STRING", "")
        if query:
            problem = _bad_bytes(unquote_to_bytes(query.replace("+", " ")))
            if problem:
                return error_response(
                    request, status=400, type="invalid_request_error", message=f"Query string {problem}."
                )
        return None

    @staticmethod
    def _buffer_chunked_body(request):
        """Read a chunked body (the server has de-chunked it) so views see it; 413 past the ceiling.

        Django only reads CONTENT_LENGTH bytes, so without this a chunked body would look empty and a
        write would silently act on ``{}``.
        """
        stream = request.META.get("wsgi.input")
        limit = settings.MAX_REQUEST_BYTES
        pieces, total = [], 0
        while stream is not None:
            try:
                piece = stream.read(64 * 1024)
            except Exception:  # the server's de-chunking failed: bad chunk size, client went away, …
                return error_response(
                    request, status=400, type="invalid_request_error", message="Malformed chunked request body."
                )
            if not piece:
                break
            total += len(piece)
            if total > limit:
                return error_response(
                    request,
                    status=413,
                    type="request_too_large",
                    message=f"Request body is over the limit of {limit} bytes.",
                )
            pieces.append(piece)
        body = b"".join(pieces)
        request.META["CONTENT_LENGTH"] = str(len(body))
        request._stream = io.BytesIO(body)
        request._read_started = False
        return None
