"""Fixtures and helpers for export / import (SPEC §8b)."""

from __future__ import annotations

import io
import json
import re

import pytest

from accounts.models import User
from memories.exchange.export import export_lines
from memories.exchange.format import Chain, dump_line
from memories.exchange.services import import_file
from memories.models import Entry, Summary
from stores.models import ReaderGrant, Store
from tests.exchange.builder import build_rich_store
from tests.factories import UserFactory
from versions.models import Memory, Version


def export_bytes(store) -> bytes:
    """The whole export of `store` through the service."""
    return b"".join(export_lines(store))


def import_bytes(data: bytes, **kwargs):
    """Import `data` with the one-transaction driver (manage.py's); returns its Imported result."""
    return import_file(io.BytesIO(data), **kwargs)


def parse(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.split(b"\n") if line]


def assemble(objects: list[dict], *, end: bool = True) -> bytes:
    """Serialise `objects` (header and content, no end line) as an export, with a correct end line.

    Tests edit the objects and re-assemble, so the chain is valid and the check they aim at is the one
    that fires (a tampered file with a stale chain is refused by the chain itself).
    """
    chain = Chain()
    out = []
    for obj in objects:
        line = dump_line(obj)
        chain.update(line[:-1])
        out.append(line)
    if end:
        out.append(dump_line({"type": "end", "lines": len(objects), "sha256": chain.state, "exported_at": STAMP}))
    return b"".join(out)


STAMP = "2026-01-01T00:00:00.000000Z"
_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def without_export_time(data: bytes) -> bytes:
    """The export with the end line's `exported_at` blanked (the one field that differs between exports)."""
    head, _, last = data.rstrip(b"\n").rpartition(b"\n")
    end = json.loads(last)
    end["exported_at"] = STAMP
    return head + b"\n" + json.dumps(end, separators=(",", ":")).encode() + b"\n"


def without_ids(data: bytes) -> bytes:
    """Replace every UUID by its order of first appearance (ids may change when an import assigns new ones)
    and drop the end line (its chain covers the ids)."""
    seen: dict[bytes, bytes] = {}

    def number(match: re.Match) -> bytes:
        return seen.setdefault(match.group(), b"id-%d" % len(seen))

    body = data.rstrip(b"\n").rpartition(b"\n")[0]
    return _UUID.sub(number, body)


@pytest.fixture
def cast(owner):
    return {
        "owner": owner,
        "bob": UserFactory(handle="bob"),
        "carol": UserFactory(handle="carol"),
        "dave": UserFactory(handle="dave"),
    }


@pytest.fixture
def rich_store(cast):
    """A user store with entries, summaries at every level (live, invalidated, redacted), redacted entries,
    file memories with renamed, deleted and redacted versions, and two readers (one revoked)."""
    return build_rich_store(cast["owner"], others=[cast["bob"]], readers=[cast["carol"], cast["dave"]])


_CACHE: dict[str, bytes] = {}


@pytest.fixture
def sample(cast) -> list[dict]:
    """The objects of a rich export (header, content; no end line), built once per test session.

    The store itself is deleted, so the file imports as onto a fresh server (the cast's handles exist).
    """
    if "export" not in _CACHE:
        store = build_rich_store(cast["owner"], others=[cast["bob"]], readers=[cast["carol"], cast["dave"]])
        _CACHE["export"] = export_bytes(store)
        store.delete()
    return parse(_CACHE["export"])[:-1]


@pytest.fixture
def own_sample(cast) -> list[dict]:
    """Like `sample`, but every entry and summary is the owner's — the shape a real user store has (only its
    owner writes it), which an HTTP import accepts (docs/export-import.md "Who may be an author")."""
    if "own" not in _CACHE:
        store = build_rich_store(cast["owner"], others=[], readers=[cast["carol"], cast["dave"]])
        _CACHE["own"] = export_bytes(store)
        store.delete()
    return parse(_CACHE["own"])[:-1]


def census() -> dict:
    """Row counts of every table an import writes (and of users), to prove a refusal changed nothing."""
    models = (Store, Entry, Summary, Version, Memory, ReaderGrant, User)
    return {model.__name__: model.objects.count() for model in models}
