"""Request-wide middleware: the request id, and screening of hostile input before any view runs (SPEC §2)."""

from __future__ import annotations

import codecs
import functools
import io
import re
from urllib.parse import unquote_to_bytes

from django.conf import settings
from django.core.handlers.wsgi import WSGIRequest
from django.urls import Resolver404, resolve
from django.utils.http import parse_header_parameters

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


_ENCODED_SLASH = re.compile(r"%2[fF]")


def _path_problem(request) -> str | None:
    """Why the request's path is not strict UTF-8 without NUL, or holds an encoded slash; None when it is.

    Django hands the path over as text (`PATH_INFO`, WSGI and ASGI alike): decoded from UTF-8, with any
    byte that is not UTF-8 put back as a percent-escape. So the text is encoded as UTF-8 again, then
    percent-decoded, and those bytes are checked (``é`` passes; ``%C3%28`` and ``%00`` do not).

    ``%2F`` in the path as sent (`RAW_URI`: gunicorn's WSGI workers and the front set it) is refused: decoded,
    it is a ``/`` to the router, so ``/backoffice%2Flogin/`` reached ``/backoffice/login/`` past a proxy
    rule that matches the raw path. No route takes a slash inside a segment (ids, slugs, handles).
    """
    if _ENCODED_SLASH.search(request.META.get("RAW_URI", "").partition("?")[0]):
        return 'holds an encoded "/" (%2F): write "/" itself (no route takes one inside a segment)'
    text = request.META.get("PATH_INFO", "")
    raw = text.encode("utf-8", "surrogatepass")
    return _bad_bytes(raw) or _bad_bytes(unquote_to_bytes(raw))


# Python text codecs that are no character set: the domain-name encodings, whose decoding fails with a
# UnicodeError Django's query and form parsing do not catch, and the codec that fails on every input.
_NOT_CHARSETS = frozenset({"idna", "punycode", "undefined"})


def content_type_problem(value: str) -> str | None:
    """Why Django's request cannot take `value` as its Content-Type header, or None when it can.

    value: the header as the server decoded it (latin-1 text; ``""`` when absent). Returns the end of the
    400's message, after "Content-Type header": ``"is malformed"`` when Django's parser raises on the
    parameters (an RFC 2231 parameter with an unknown charset, ``a*=bogus''%41``, which makes
    `WSGIRequest()` raise), ``"has an empty charset"``, ``"names an unknown charset"``, or ``"names a codec
    that is not a character set"`` (``rot13``, ``hex``, ``idna``…: decoding the query or a form with it
    raises). SPEC §2: such a request is refused before any view runs (`HostileInputMiddleware`).
    """
    if ";" not in value:  # no parameters: Django takes the whole value as the media type
        return None
    return _parameters_problem(value)


@functools.lru_cache(maxsize=256)  # clients repeat their header: Django's own parse stays the only one
def _parameters_problem(value: str) -> str | None:
    try:
        _, params = parse_header_parameters(value)  # what HttpRequest._set_content_type_params runs
    except Exception:  # ValueError (an RFC 2231 charset Django rejects), anything its email parser raises
        return "is malformed"
    charset = params.get("charset")
    if charset is None:
        return None
    if not charset.strip():
        return "has an empty charset"
    try:
        codec = codecs.lookup(charset)
    except (LookupError, ValueError):  # ValueError: a NUL in the name
        return "names an unknown charset"
    if codec.name in _NOT_CHARSETS:
        return "names a codec that is not a character set"
    try:
        b"a".decode(codec.name)  # not b"": an empty input is decoded without looking at the codec
    except LookupError:  # a bytes transform (rot13, hex, base64, zlib…), not a text encoding
        return "names a codec that is not a character set"
    except UnicodeError:  # "a" alone is no whole character in it (UTF-16, UTF-32): a text encoding still
        pass
    return None


def _codings(value: str) -> list[str]:
    return [coding.strip().lower() for coding in value.split(",") if coding.strip()]


def _coding_refusal(request):
    """The refusal of a body in a coding this service does not decode, or None (RFC 9110 §8.4.1, RFC 9112 §6.1).

    `Content-Encoding` other than identity on a request with a body is 415: the body was stored as it came,
    so a plain body labelled gzip was taken and a proxy that decodes it would have seen another one (a
    breaker). A transfer coding other than `chunked` alone is 400: gunicorn reads `gzip, chunked` as
    chunked and hands the still-coded body on (two Transfer-Encoding headers arrive here joined by a
    comma). Nothing is read or changed.
    """
    meta = request.META
    has_body = meta.get("CONTENT_LENGTH") not in (None, "", "0") or "HTTP_TRANSFER_ENCODING" in meta
    encoding = _codings(meta["HTTP_CONTENT_ENCODING"]) if has_body and "HTTP_CONTENT_ENCODING" in meta else ()
    if any(coding != "identity" for coding in encoding):
        message = f"Content-Encoding {', '.join(encoding)} is not accepted: send the body uncompressed."
        return error_response(request, status=415, type="invalid_request_error", message=message)
    transfer = _codings(meta["HTTP_TRANSFER_ENCODING"]) if "HTTP_TRANSFER_ENCODING" in meta else ()
    if transfer and transfer != ["chunked"]:
        message = (
            f"Transfer-Encoding {', '.join(transfer)} is not supported: send the body with Content-Length, or "
            "with Transfer-Encoding: chunked alone."
        )
        return error_response(request, status=400, type="invalid_request_error", message=message)
    return None


def _read_with_a_body(request) -> bool:
    """Whether `request` is a GET or HEAD with a body (not empty; a chunked one is buffered by now) to a route
    whose class-based view answers GET (DRF's and Django's: the API, /openapi.yaml). Any other route answers
    for itself: a view without `get`, such as every write, its 405 (schemathesis: a GET to a POST route is
    405 whatever it carries), a function view its own answer (/mcp its 405, the probes and /docs/memories
    their 200; helper-100), a retired route its 410, an unknown path its 404. Resolves the path only for
    such a request."""
    if request.method not in ("GET", "HEAD") or request.META.get("CONTENT_LENGTH") in (None, "", "0"):
        return False
    try:
        match = resolve(request.path_info)
    except Resolver404:
        return False
    view_class = getattr(match.func, "view_class", None) or getattr(match.func, "cls", None)
    if view_class is None or getattr(view_class, "answers_every_request", False):  # a retired route's 410
        return False
    return hasattr(view_class, "get")


class ScreenedRequest(WSGIRequest):
    """Django's WSGIRequest, built without raising from a Content-Type it cannot take.

    When `content_type_problem` finds one, the request has no content type (``""``, no parameters, the
    default charset) instead of raising in the constructor, and `HostileInputMiddleware` answers it with a
    400 before anything reads it. The request class of the front's two Django handlers (`config.asgi`),
    of the fast lanes (`config.fastlane`) and of `config.wsgi`: Django's handler then sends
    ``request_finished`` for every ``request_started``.
    """

    def _set_content_type_params(self, meta):  # HttpRequest's, which WSGIRequest.__init__ calls
        if content_type_problem(meta.get("CONTENT_TYPE", "")) is None:
            super()._set_content_type_params(meta)
        else:
            self.content_type, self.content_params = "", {}


class HostileInputMiddleware:
    """Reject oversized bodies (413), a Content-Type Django cannot take (`content_type_problem`), a body in a
    content or transfer coding we do not decode (415 / 400, `_coding_refusal`), a GET or HEAD with a body
    (400: nothing would read it) and NUL / lone surrogates / bad UTF-8 in the path or query (400).

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
        problem = content_type_problem(request.META.get("CONTENT_TYPE", ""))
        if problem:
            return error_response(
                request, status=400, type="invalid_request_error", message=f"Content-Type header {problem}."
            )
        refusal = _coding_refusal(request)
        if refusal:
            return refusal
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
        if _read_with_a_body(request):
            # Read by nobody, so a parameter sent there (`{"block_ms": 900}` on a poll) was silently ignored
            # where every body field and query parameter nobody takes is a 400 (helper-97).
            return error_response(
                request,
                status=400,
                type="invalid_request_error",
                message=f"A {request.method} request takes no body; send its parameters in the query string.",
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
