"""Success bodies of the Memory Stores surface: bare SDK objects and ``{"data", "next_page"}`` pages (SPEC §5).

Unlike the Memories log surface there is no ``{data, meta}`` envelope: the anthropic SDK parses the
objects directly. Every success is 200.
"""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response

from config.api import PlainObjectRendering
from stores.models import Store
from versions.api.serializers import (
    VIEWS,
    MemoryDeletedSerializer,
    MemoryPrefixSerializer,
    MemorySerializer,
    MemoryStoreDeletedSerializer,
    MemoryStoreSerializer,
    MemoryVersionSerializer,
)
from versions.models import Memory, Version
from versions.selectors import MemoryPrefix


def store_body(store: Store) -> Response:
    return Response(MemoryStoreSerializer(store).data)


def store_deleted_body(store_id: Any) -> Response:
    return Response(MemoryStoreDeletedSerializer({"id": store_id}).data)


# `MemorySerializer(memory, context={"view": view}).data` per view, without DRF's per-field walk (issue 17).
RENDER_MEMORY = {view: PlainObjectRendering(MemorySerializer, {"view": view}).one for view in VIEWS}


def memory_body(memory: Memory, *, view: str) -> Response:
    """The `memory` object of `memory` (``content`` only with view ``full``), as `MemorySerializer` renders
    it (`RENDER_MEMORY`)."""
    return Response(RENDER_MEMORY[view](memory))


def memory_deleted_body(memory_id: Any) -> Response:
    return Response(MemoryDeletedSerializer({"id": memory_id}).data)


def version_body(version: Version, *, view: str) -> Response:
    return Response(MemoryVersionSerializer(version, context={"view": view}).data)


def page_body(data: list[dict[str, Any]], next_page: str | None) -> Response:
    """A list page; `next_page` is null on the last page (the SDK stops iterating there)."""
    return Response({"data": data, "next_page": next_page})


def store_items(stores: list[Store]) -> list[dict[str, Any]]:
    return MemoryStoreSerializer(stores, many=True).data


def memory_items(items: list[Memory | MemoryPrefix], *, view: str) -> list[dict[str, Any]]:
    """Render a memory listing: memories and `memory_prefix` roll-ups, in the given order."""
    out: list[dict[str, Any]] = []
    render_memory = RENDER_MEMORY[view]
    prefix_serializer = MemoryPrefixSerializer()
    for item in items:
        out.append(prefix_serializer.to_representation(item) if isinstance(item, MemoryPrefix) else render_memory(item))
    return out


def version_items(versions: list[Version], *, view: str) -> list[dict[str, Any]]:
    return MemoryVersionSerializer(versions, many=True, context={"view": view}).data
