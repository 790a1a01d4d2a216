"""`Idempotency-Key` on the creates that mint a new object: a retry replays the first answer
(docs/decisions.md "Idempotency"; SPEC §2).

`POST /memory_stores`, `/sessions`, `/environments`, `/environments/{id}/keys`, `/me/tokens`, `/projects`,
`/sections` and `/memories/imports` (an import's first chunk, which opens the import and its hidden store) make
a new object on every call (a project's or section's retry: `409 slug_taken` for the caller's own new
slug), so a client that retries after a lost answer (the anthropic SDK retries a POST after a
connection error or a 503, and a 503 from the request deadline does not prove the create did not commit)
would make a second one: a second store, a second agent run, a second live token. With an
`Idempotency-Key` header (the SDK sends the same `extra_headers` on each of its retries) the view runs in
one transaction with a row for (caller, key):

- the first request inserts the row, runs the view, and stores its 2xx answer in the row before the
  transaction commits — the object and the answer commit together, or neither does;
- a request with the same key while the first is in flight waits on the row's unique index, then replays;
- a later one replays the stored status and body with `Idempotent-Replayed: true`; nothing runs again;
- a refusal (4xx) or fault stores nothing: the row goes with the rolled-back transaction, so a retry runs
  the request again;
- the same key with another method, path, query or body is 409 `idempotency_key_reused`; a key is
  remembered for `REPLAY_SECONDS` (24 h), then starts afresh. Keys are per calling credential (an API token):
  another token, even of the same user, never gets an answer it was not given — a short-lived token must
  not collect the secret of a longer-lived one another token created (a tester).

The answer may hold a secret shown once (a token, an environment key), so nothing is stored in clear: HKDF
over the key (salt `SECRET_KEY`, the user and the credential in its info) gives 64 bytes, the first half the
row's lookup digest and the second the AES-GCM key of its body, bound to the request's fingerprint.

Locks: a claim waits only on a transaction holding the same (credential, key) row. The purge of expired
rows is one statement in its own transaction, before the create's, and skips locked rows: inside the
create's transaction it could lock another request's expired key, which then waited for the whole create
(or deadlocked with it: two requests each taking over an expired key the other's purge held — a tester).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.db import connection, transaction
from rest_framework.response import Response

from accounts.models import IdempotentRequest
from config.api import Utf8TextField, idempotency_key_header
from config.errors import Conflict
from config.renderers import JSONRenderer

REPLAY_SECONDS = 24 * 3600  # how long a key's answer is replayed; the row is then reused or purged
KEY_MAX_CHARS = 128  # as the note's Idempotency-Key (its client_nonce)
KEY_FIELD = Utf8TextField(min_bytes=1, max_length=KEY_MAX_CHARS)  # 1–128 characters, no NUL or lone surrogate
REPLAYED_HEADER = "Idempotent-Replayed"
PURGE_BATCH = 100  # expired rows of the caller removed per keyed create

_TABLE = IdempotentRequest._meta.db_table
# Insert the key's row, or take over one whose replay period has passed; nothing when a live row holds it.
_CLAIM_SQL = f"""INSERT INTO {_TABLE} (user_id, key_digest, fingerprint, created_at) VALUES (%s, %s, %s, now())
ON CONFLICT (user_id, key_digest) DO UPDATE
SET fingerprint = EXCLUDED.fingerprint, status = NULL, sealed_body = NULL, created_at = now()
WHERE {_TABLE}.created_at <= now() - make_interval(secs => %s) RETURNING id"""  # noqa: S608 - table name is ours
_FIND_SQL = f"SELECT fingerprint, status, sealed_body FROM {_TABLE} WHERE user_id = %s AND key_digest = %s"  # noqa: S608
_PURGE_SQL = f"""DELETE FROM {_TABLE} WHERE id IN (SELECT id FROM {_TABLE} WHERE user_id = %s
AND created_at <= now() - make_interval(secs => %s) LIMIT %s FOR UPDATE SKIP LOCKED)"""  # noqa: S608


class IdempotencyKeyReused(Conflict):
    """409: the key was first used for another request (method, path, query or body)."""

    reason = "idempotency_key_reused"
    message = (
        "This Idempotency-Key was used for a different request in the last 24 hours; use a new key for a new "
        "request, and the same key only to retry the same request."
    )


@dataclass(frozen=True)
class _Keys:
    """The two halves of the key's derivation: the row's lookup digest and its body's AES-GCM key."""

    digest: bytes
    cipher: AESGCM


def _derive(user_id: object, credential_id: object, key: str) -> _Keys:
    """HKDF-SHA256 over the key, salted with `SECRET_KEY`, bound to the user and the calling credential."""
    material = HKDF(
        algorithm=hashes.SHA256(),
        length=64,
        salt=settings.SECRET_KEY.encode("utf-8"),
        info=f"memories idempotent request v1 {user_id} {credential_id}".encode("ascii"),
    ).derive(key.encode("utf-8"))
    return _Keys(digest=material[:32], cipher=AESGCM(material[32:]))


def fingerprint(request) -> bytes:
    """SHA-256 (32 bytes) of the request's method, path, query string and body: parsed JSON with its keys
    sorted (so a client that re-serialises the same object in another key order retries the same request),
    or the SHA-256 of the bytes a raw parser hands over (an import's JSON Lines chunk). Reads `request.data`
    (DRF's parse errors propagate as the usual 400/415)."""
    data = request.data
    if isinstance(data, bytes):
        body = "bytes:" + hashlib.sha256(data).hexdigest()
    else:
        body = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    parts = (request.method, request.path, request.META.get("QUERY_STRING", ""), body)
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).digest()


def _claim(user_id: object, keys: _Keys, fingerprint_: bytes) -> tuple[int | None, tuple | None]:
    """In the caller's transaction: insert (or take over an expired) row for the key and return
    ``(row id, None)``; or, when a committed row holds the key, ``(None, (fingerprint, status, sealed))``.
    A transaction in flight with the same key is waited for (the unique index), within `lock_timeout`."""
    with connection.cursor() as cursor:
        for _ in range(3):  # a row removed between the two statements (a purge): claim again
            cursor.execute(_CLAIM_SQL, [user_id, keys.digest, fingerprint_, REPLAY_SECONDS])
            row = cursor.fetchone()
            if row is not None:
                return row[0], None
            cursor.execute(_FIND_SQL, [user_id, keys.digest])
            found = cursor.fetchone()
            if found is not None:
                return None, (bytes(found[0]), found[1], bytes(found[2]) if found[2] is not None else None)
    raise RuntimeError("idempotency key row vanished three times in a row")  # pragma: no cover - needs a purge race


def _purge_expired(user_id: object) -> None:
    """Remove up to `PURGE_BATCH` of the user's expired rows, skipping any another request holds; call it
    outside the create's transaction (one statement, autocommit), so its locks end with it."""
    with connection.cursor() as cursor:
        cursor.execute(_PURGE_SQL, [user_id, REPLAY_SECONDS, PURGE_BATCH])


def _replay(keys: _Keys, fingerprint_: bytes, found: tuple) -> Response:
    stored_fingerprint, status, sealed = found
    if stored_fingerprint != fingerprint_ or status is None or sealed is None:
        raise IdempotencyKeyReused()
    body = keys.cipher.decrypt(sealed[:12], sealed[12:], stored_fingerprint)
    return Response(orjson.loads(body), status=status, headers={REPLAYED_HEADER: "true"})


def replayable(post: Callable | None = None, *, before: Callable | None = None) -> Callable:
    """Decorate an APIView's create method (`post(self, request, *args, **kwargs)`) with
    `Idempotency-Key` replay (module docstring); ``@replayable`` or ``@replayable(before=…)``. Without the
    header the method runs as before. A bad key is 400 (`config.api.idempotency_key_header`), the key reused
    for another request 409 `idempotency_key_reused`. The method must answer through a DRF `Response` whose
    data is JSON; its 2xx answer is stored (status and body; its other headers are not) and a 4xx/5xx answer
    or an exception stores nothing. `before(view, request)`: work that must not run inside the create's
    transaction (it commits on its own, as the import's expiry of idle imports does); it runs first, keyed
    or not. The OpenAPI document gets the header and `Idempotent-Replayed` from
    `config.schema.ApiAutoSchema`, which reads the `replayable` attribute set here."""
    if post is None:
        return functools.partial(replayable, before=before)

    @functools.wraps(post)
    def replaying(view, request, *args, **kwargs):
        key = idempotency_key_header(request, KEY_FIELD)
        if before is not None:
            before(view, request)
        if key is None:
            return post(view, request, *args, **kwargs)
        user_id = request.user.pk
        keys = _derive(user_id, getattr(request.auth, "pk", None), key)
        fingerprint_ = fingerprint(request)
        _purge_expired(user_id)  # one statement of its own: its row locks never outlive it
        with transaction.atomic():
            row_id, found = _claim(user_id, keys, fingerprint_)
            if found is not None:
                return _replay(keys, fingerprint_, found)
            response = post(view, request, *args, **kwargs)
            if not 200 <= response.status_code < 300:
                transaction.set_rollback(True)
                return response
            body = JSONRenderer().render(response.data)
            nonce = os.urandom(12)
            sealed = nonce + keys.cipher.encrypt(nonce, body, fingerprint_)
            IdempotentRequest.objects.filter(pk=row_id).update(status=response.status_code, sealed_body=sealed)
        return response

    replaying.replayable = True
    return replaying
