"""The public directory `GET /memories` (SPEC §8): public stores' metadata as Markdown, JSON or YAML.

Format: the URL suffix (`/memories.md`, `.json`, `.yaml`) wins; otherwise the `Accept` header; Markdown
when the client accepts anything. Only stores anyone may read are listed — whoever asks, staff included —
and only metadata (never entries, summaries or files). Keyset-paginated; the next page's URL is in the body
(`meta.next_url`, a "Next page" link in Markdown) and in a `Link: <…>; rel="next"` header.
"""

from __future__ import annotations

import json
import re
from urllib.parse import urlencode

import yaml
from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, negotiation, renderers
from rest_framework.response import Response
from rest_framework.utils import encoders
from rest_framework.views import APIView

from stores import selectors
from stores.api import serializers as s
from stores.api.pagination import decode_cursor, take_page

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~&])")  # `&`: no entity (`&copy;`) renders


def md_escape(text: str) -> str:
    """Backslash-escape Markdown punctuation so user text renders literally (names, handles, slugs)."""
    return _MD_SPECIAL.sub(r"\\\1", text)


_BACKTICKS = re.compile(r"`+")


def _quote(text: str) -> str:
    """A stranger's description as a block quote holding a fenced code block: CommonMark renders it as the
    literal text it is — no heading, link, image (a tracking pixel), HTML or entity of the author's, and no
    way out of the fence, which is longer than any backtick run in the text — while a raw reader (an agent)
    reads the text unchanged. (A quote of the Markdown itself let a description render headings and live
    links in the directory; a breaker, 2026-12-06.)"""
    fence = "`" * max(3, 1 + max((len(run) for run in _BACKTICKS.findall(text)), default=0))
    lines = [fence + "text", *text.splitlines(), fence]
    return "\n".join("> " + line if line else ">" for line in lines)


class MarkdownRenderer(renderers.BaseRenderer):
    """`text/markdown`: one section per store and a "Next page" link."""

    media_type = "text/markdown"
    format = "md"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        if not isinstance(data, dict) or "data" not in data:  # e.g. OPTIONS metadata: show it as JSON
            return ("```json\n" + json.dumps(data, cls=encoders.JSONEncoder, indent=2) + "\n```\n").encode("utf-8")
        lines = [
            "# Public memories",
            "",
            "Public stores on this server (metadata only). Read one with `GET /api/v1/memories/{id}`.",
            "",
        ]
        if not data["data"]:
            lines += ["_No public stores here._", ""]
        for store in data["data"]:
            subject = store["subject"]
            who = f"@{md_escape(subject['handle'])}" if "handle" in subject else md_escape(subject["slug"])
            lines += [f"## {md_escape(store['name'])}", ""]
            lines += [
                f"- id: `{store['id']}`",
                f"- scope: {store['scope']} · subject: {who}",
                f"- entries: {store['entry_count']} · files: {store['memory_count']} · "
                f"generation: {store['generation']}",
                f"- created: {store['created_at']} · updated: {store['updated_at']}",
            ]
            if store["archived_at"]:
                lines.append(f"- archived: {store['archived_at']}")
            lines.append("")
            if store["description_md"]:
                lines += [_quote(store["description_md"]), ""]
        if data["meta"]["next_url"]:
            lines += [f"[Next page]({data['meta']['next_url']})", ""]
        return "\n".join(lines).encode("utf-8")


class YAMLRenderer(renderers.BaseRenderer):
    """`application/yaml` (safe_dump, UTF-8, keys in serializer order)."""

    media_type = "application/yaml"
    format = "yaml"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        plain = json.loads(json.dumps(data, cls=encoders.JSONEncoder))  # ReturnDict etc. → plain dicts
        return yaml.safe_dump(plain, allow_unicode=True, sort_keys=False).encode("utf-8")


class TextYAMLRenderer(YAMLRenderer):
    media_type = "text/yaml"


class XYAMLRenderer(YAMLRenderer):
    media_type = "application/x-yaml"


class SuffixFirstNegotiation(negotiation.DefaultContentNegotiation):
    """A URL suffix, else the documented `?format=` (md, json, yaml), picks the renderer outright (an
    `Accept` header cannot turn `.yaml` into a 406). An unknown suffix is a 404 (no such URL); an unknown
    `format` value falls back to `Accept` and the view's query serializer answers 400 naming it. DRF's own
    `?format=` override is off for the whole API (`URL_FORMAT_OVERRIDE: None`): this view reads it itself.
    """

    def select_renderer(self, request, renderers_, format_suffix=None):
        wanted = format_suffix or request.query_params.get("format")
        if wanted:
            for renderer in renderers_:
                if renderer.format == wanted:
                    return renderer, renderer.media_type
            if format_suffix:
                raise exceptions.NotFound()
        return super().select_renderer(request, renderers_, None)


def _base_url(request) -> str:
    base = settings.PUBLIC_BASE_URL.rstrip("/")
    return base + request.path if base else request.build_absolute_uri(request.path)


class PublicDirectoryView(APIView):
    http_method_names = ["get", "head"]  # OPTIONS would hand the Markdown renderer DRF's metadata
    """GET /memories (+ .md/.json/.yaml): the public directory. Anonymous callers welcome."""

    allow_anonymous_reads = True
    renderer_classes = [MarkdownRenderer, renderers.JSONRenderer, YAMLRenderer, TextYAMLRenderer, XYAMLRenderer]
    content_negotiation_class = SuffixFirstNegotiation

    @extend_schema(
        operation_id="public_memories_directory",
        tags=["directory"],
        parameters=[s.DirectoryQuerySerializer],
        responses={
            (200, "text/markdown"): OpenApiTypes.STR,
            (200, "application/json"): s.PublicDirectorySerializer,
            (200, "application/yaml"): s.PublicDirectorySerializer,
            (200, "text/yaml"): s.PublicDirectorySerializer,
            (200, "application/x-yaml"): s.PublicDirectorySerializer,
        },
        description="Public stores' metadata (never entry text), newest first, paginated. Markdown by default; "
        "JSON or YAML by `Accept` or by the `/memories.json`, `/memories.yaml` (and `/memories.md`) URLs. YAML "
        "asked for as `text/yaml` or `application/x-yaml` (older names) is served under the name asked for.",
    )
    def get(self, request, format=None):
        query = s.DirectoryQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        scope = query.validated_data.get("scope")
        limit = query.validated_data["limit"]
        cursor = query.validated_data.get("cursor")
        keys = decode_cursor(cursor, kind="directory", binding=scope, arity=2) if cursor else None
        stores = selectors.after_newest_first(
            selectors.public_stores(scope=scope), selectors.parse_newest_first_keys(keys) if keys else None
        )
        page = take_page(stores, limit=limit, kind="directory", keys_of=selectors.newest_first_keys, binding=scope)
        next_url = None
        if page.next_cursor:
            params = {"cursor": page.next_cursor, "limit": limit, **({"scope": scope} if scope else {})}
            next_url = f"{_base_url(request)}?{urlencode(params)}"
        body = {
            "data": s.PublicStoreSerializer(page.rows, many=True).data,
            "meta": {"next_cursor": page.next_cursor, "next_url": next_url},
        }
        headers = {"Link": f'<{next_url}>; rel="next"'} if next_url else None
        return Response(body, headers=headers)


@extend_schema(exclude=True)
class PublicDirectoryFormatView(PublicDirectoryView):
    """The same directory at `/memories.md`, `/memories.json`, `/memories.yaml` (documented on /memories)."""
