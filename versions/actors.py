"""Who wrote or redacted a version: the SDK's Actor union (SPEC §5, MEMORY_STORES_API §5).

An actor is recorded at write time and never updated; it may name a principal that no longer exists.
Stored as JSON on the version (`created_by`, `redacted_by`) with `api_key_id` / `session_id` / `user_id`
copied into indexed columns for the version-list filters.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal

from accounts.models import ApiToken

ActorType = Literal["api_actor", "session_actor", "user_actor"]

# The id key each actor type carries on the wire.
ID_KEYS: dict[str, str] = {"api_actor": "api_key_id", "session_actor": "session_id", "user_actor": "user_id"}


@dataclass(frozen=True)
class Actor:
    """One author: `type` is ``api_actor`` (an API token), ``session_actor`` (a session's work credential)
    or ``user_actor`` (a back-office user); `id` is that principal's UUID."""

    type: ActorType
    id: uuid.UUID

    @classmethod
    def api(cls, token_id: uuid.UUID) -> Actor:
        """An API write made with the token `token_id` (`api_key_id`)."""
        return cls("api_actor", token_id)

    @classmethod
    def session(cls, session_id: uuid.UUID) -> Actor:
        """A write made through a session's work credential."""
        return cls("session_actor", session_id)

    @classmethod
    def user(cls, user_id: uuid.UUID) -> Actor:
        """A write made by a person in the back office."""
        return cls("user_actor", user_id)

    def as_json(self) -> dict[str, str]:
        """The wire object, e.g. ``{"type": "api_actor", "api_key_id": "<uuid>"}``."""
        return {"type": self.type, ID_KEYS[self.type]: str(self.id)}

    def columns(self) -> dict[str, Any]:
        """The indexed filter columns of a version this actor creates (`api_key_id`, `session_id`, `user_id`)."""
        return {key: (self.id if key == ID_KEYS[self.type] else None) for key in ID_KEYS.values()}


def actor_for_request(request: Any) -> Actor:
    """The actor of an authenticated API request: ``api_actor`` with the bearer token's id.

    Raises ValueError for a request without an API token (views only call it after ScopedAccess, which
    admits no anonymous writes). Session work credentials map to ``session_actor`` once sessions exist.
    """
    auth = getattr(request, "auth", None)
    if isinstance(auth, ApiToken):
        return Actor.api(auth.id)
    session_id = getattr(auth, "session_id", None)
    if session_id is not None:
        return Actor.session(session_id)
    raise ValueError("write request without a credential")
