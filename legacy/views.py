"""`GET /docs/memories`: the Memories guide as Markdown (SPEC §1, §7); public, no token needed."""

from __future__ import annotations

from django.http import HttpResponse

from config.errors import error_response
from legacy.guide import guide_markdown


def memories_guide(request):
    """Serve docs/memories-guide.md as ``text/markdown; charset=utf-8`` (GET and HEAD; else 405)."""
    if request.method not in ("GET", "HEAD"):
        return error_response(
            request,
            status=405,
            type="invalid_request_error",
            message=f'Method "{request.method}" not allowed.',
            headers={"Allow": "GET, HEAD"},
        )
    response = HttpResponse(guide_markdown(), content_type="text/markdown; charset=utf-8")
    response["Cache-Control"] = "public, max-age=300"
    return response
