"""`GET /docs/memories`: the Memories guide as Markdown (SPEC §1, §7); public, no token needed."""

from __future__ import annotations

from django.http import HttpResponse

from config.views import allow_methods
from legacy.guide import guide_markdown


@allow_methods("GET")
def memories_guide(request):
    """Serve docs/memories-guide.md as ``text/markdown; charset=utf-8`` (GET and HEAD; else 405)."""
    response = HttpResponse(guide_markdown(), content_type="text/markdown; charset=utf-8")
    response["Cache-Control"] = "public, max-age=300"
    return response
