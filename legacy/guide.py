"""The Memories guide (`docs/memories-guide.md`) and its public URL (SPEC §7)."""

from __future__ import annotations

from functools import lru_cache

from django.conf import settings
from django.urls import reverse

GUIDE_PATH = settings.BASE_DIR / "docs" / "memories-guide.md"


def guide_url(request) -> str:
    """Absolute URL of `/docs/memories`: under settings.PUBLIC_BASE_URL when set, else the request's host."""
    path = reverse("memories-guide")
    base = settings.PUBLIC_BASE_URL.rstrip("/")
    return f"{base}{path}" if base else request.build_absolute_uri(path)


@lru_cache(maxsize=1)
def guide_markdown() -> str:
    """The guide's Markdown text (read once per process)."""
    return GUIDE_PATH.read_text(encoding="utf-8")
