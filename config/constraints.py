"""Recognising which constraint an IntegrityError violated, whatever the database calls it (issue 21).

On one PostgreSQL node a unique violation names the constraint exactly (`entry_store_author_nonce_unique`).
On Citus the statement runs on a shard, and the shard's constraints carry the shard id: Citus's
`AppendShardIdToName` makes ``<name>_<shardid>`` (``entry_store_author_nonce_unique_102048``), and when
that would pass PostgreSQL's 63-byte identifier limit it keeps a prefix of the name and adds an 8-hex-digit
hash of the whole name: ``<prefix>_<hash>_<shardid>``. Code that decides what a violation *means*
(a nonce replay, a path taken, a canonical store created by a racing request) asks `violates`, never
compares names itself, so the same code path serves one node and a cluster.
"""

from __future__ import annotations

import re

from django.db import IntegrityError

_SHARD_SUFFIX = re.compile(r"^(?P<stem>.+)_(?P<shard>[0-9]+)$")
_HASHED_STEM = re.compile(r"^(?P<prefix>.+)_[0-9a-f]{8}$")
_IDENTIFIER_MAX_BYTES = 63  # PostgreSQL's NAMEDATALEN - 1


def constraint_name(exc: BaseException) -> str | None:
    """The constraint name PostgreSQL reported for `exc` (a Django IntegrityError or psycopg error), or None."""
    for candidate in (exc, getattr(exc, "__cause__", None)):
        diag = getattr(candidate, "diag", None)
        name = getattr(diag, "constraint_name", None)
        if name:
            return name
    return None


def matches(reported: str | None, base: str) -> bool:
    """True if `reported` is the constraint `base` on one node or on any Citus shard of its table.

    reported: the name from the error (None → False); base: the name in the model's Meta (≤63 bytes).
    """
    if not reported:
        return False
    if reported == base:
        return True
    suffixed = _SHARD_SUFFIX.match(reported)
    if suffixed is None:
        return False
    stem = suffixed["stem"]
    if stem == base:
        return True
    # A name too long for the shard suffix: a prefix of the base, an 8-hex-digit hash, the shard id.
    hashed = _HASHED_STEM.match(stem)
    if hashed is None or len(base.encode()) + len(suffixed["shard"]) + 1 <= _IDENTIFIER_MAX_BYTES:
        return False
    return base.startswith(hashed["prefix"])


def violates(exc: IntegrityError, *bases: str) -> bool:
    """True if `exc` is a violation of one of the constraints named `bases` (base names, shard-independent)."""
    reported = constraint_name(exc)
    return any(matches(reported, base) for base in bases)
