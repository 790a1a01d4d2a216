"""Field rules of environments, sessions and work (SPEC §5, §9).

Every function returns the cleaned value or raises InvalidRequest naming the field. Store names,
descriptions and metadata follow `stores.validation`, so both surfaces word their errors the same way.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any

from django.utils.dateparse import parse_datetime

from config.errors import InvalidRequest, field_problems
from config.fields import canonical_uuid, not_a, not_a_string
from config.text import field_name, first_forbidden_char, quoted
from sessions.models import (
    INSTRUCTIONS_MAX_CHARS,
    KEY_NAME_MAX_CHARS,
    MAX_ATTACHED_STORES,
    MOUNT_ROOT,
    NO_HEARTBEAT,
    WORKER_ID_MAX_CHARS,
    Access,
    EnvironmentScope,
)
from stores import validation as store_validation

AGENT_ID_MAX_CHARS = 200
_SLUG_RUN = re.compile(r"[^a-z0-9]+")
_WORKER_ID = re.compile(r"[\x21-\x7e]+")
# RFC 3339 date-time (what `last_heartbeat` is written as); Python's fromisoformat, behind parse_datetime,
# would also take ISO 8601's basic format (20261205T222909Z) and more.
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:[Zz]|[+-]\d{2}:\d{2})")


def _text(value: object, *, field: str, max_chars: int) -> str:
    if not isinstance(value, str):
        raise InvalidRequest(f"{field}: {not_a_string(value)}")
    if len(value) > max_chars:
        raise InvalidRequest(f"{field}: must be at most {max_chars} characters (got {len(value)}).")
    problem = first_forbidden_char(value)
    if problem:
        raise InvalidRequest(f"{field}: {problem}.")
    return value


# --- environments ---------------------------------------------------------------------------------


def _refuse_unknown(value: dict, known: set[str], within: str) -> None:
    """Refuse the keys of the nested object `value` (at `within`) outside `known` as a body's unknown fields
    are refused: ``agent.x: Unknown field.``, a key that is no plain name written as JSON (``agent["a, b"]``),
    at most 20 listed (`config.errors.field_problems`). Was ``agent: unknown field(s) "x".``."""
    unknown = sorted(set(value) - known)
    if unknown:
        raise field_problems({field_name(key, within): "Unknown field." for key in unknown})


_SELF_HOSTED_OBJECT = 'an object such as {"type": "self_hosted"}'


def clean_config(value: object, *, field: str = "config") -> dict[str, str]:
    """``{"type": "self_hosted"}`` (or null/absent, meaning that); any other type is 400 (SPEC §5)."""
    if value is None:
        return {"type": "self_hosted"}
    if not isinstance(value, dict):
        raise InvalidRequest(f"{field}: {not_a(_SELF_HOSTED_OBJECT, value)}")
    _refuse_unknown(value, {"type"}, field)  # a self_hosted config has only "type"
    kind = value.get("type")
    if kind != "self_hosted":
        raise InvalidRequest(
            f'{field}.type: {quoted(kind)} is not served; this service runs "self_hosted" environments only '
            "(your own workers poll for work)."
        )
    return {"type": "self_hosted"}


def clean_scope(value: object, *, field: str = "scope") -> str | None:
    """`organization`, `account` or null. Stored and echoed; it never widens who sees the environment."""
    if value is None:
        return None
    if value not in EnvironmentScope.values:
        raise InvalidRequest(f'{field}: must be "organization", "account" or null.')
    return value  # type: ignore[return-value]


def clean_nullable_description(value: object, *, field: str = "description") -> str | None:
    """null, or Markdown of at most 1,024 characters (an empty string stays an empty string)."""
    return None if value is None else store_validation.clean_description(value, field=field)


def clean_key_name(value: object, *, field: str = "name") -> str:
    """``""``, or up to 100 characters without control characters: the name rule of environments and
    session titles (`stores.validation.clean_name`), not a copy of it."""
    if value == "":
        return ""
    return store_validation.clean_name(value, field=field, max_chars=KEY_NAME_MAX_CHARS)


# --- sessions -------------------------------------------------------------------------------------


def clean_id(value: object, *, field: str, what: str) -> uuid.UUID:
    """An id in a request body: a JSON string spelling a UUID canonically — lowercase and hyphenated, as the
    API returns ids and as every id in a URL must be (`config.fields.canonical_uuid`) — or a `uuid.UUID`
    from Python callers. Anything else is 400 naming `field`: a number (``5`` would be ``UUID(int=5)``), a
    boolean, an array, an object, ``"env_01"``, and the other spellings Python's `uuid.UUID` takes (upper
    case, braces, ``urn:uuid:``, no hyphens), which a URL's id refuses as naming nothing."""
    if not isinstance(value, str | uuid.UUID):
        raise InvalidRequest(f"{field}: {not_a_string(value)}")
    parsed = canonical_uuid(value)
    if parsed is None:
        raise InvalidRequest(f"{field}: must be {what}: a UUID in lowercase with hyphens, as the API writes it.")
    return parsed


def clean_environment_id(value: object, *, field: str = "environment_id") -> uuid.UUID:
    return clean_id(value, field=field, what="an environment id")


def clean_agent_id(value: object, *, field: str) -> str:
    """An agent id: 1–200 characters under the one name rule (`stores.validation.clean_name`: no control
    characters or line separators, no invisible formatting characters, a visible character). It was any text
    but NUL and lone surrogates: `"a\n…"`, ESC sequences, U+2028, `"\u200b"` and `"   "` were stored
    (helper-96, helper-99). Raises InvalidRequest naming `field`."""
    return store_validation.clean_name(value, field=field, max_chars=AGENT_ID_MAX_CHARS)


def clean_agent(value: object, *, field: str = "agent") -> dict[str, Any]:
    """The session's `agent` input: an agent id string, or ``{"type": "agent", "id", "version"?}``.

    Returns the snapshot ``{"id": str, "version": int | None}``. The service never runs a model, so the
    agent is kept as given; ``agent_with_overrides`` (model, tools, system prompt) is refused.
    """
    if isinstance(value, str):
        return {"id": clean_agent_id(value, field=field), "version": None}
    if not isinstance(value, dict):
        raise InvalidRequest(f'{field}: must be an agent id string or an object {{"type": "agent", "id", "version"}}.')
    kind = value.get("type")
    if kind == "agent_with_overrides":
        raise InvalidRequest(
            f'{field}.type: "agent_with_overrides" is not supported: this service never runs a model, so there '
            'is nothing to override; pass the agent id or {"type": "agent", "id", "version"}.'
        )
    if kind != "agent":
        raise InvalidRequest(f'{field}.type: must be "agent".')
    _refuse_unknown(value, {"type", "id", "version"}, field)
    agent_id = clean_agent_id(value.get("id"), field=f"{field}.id")
    version = value.get("version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise InvalidRequest(f"{field}.version: {not_a('an integer or null', version)}")
    if version is not None and not 1 <= version < 2**31:
        raise InvalidRequest(f"{field}.version: must be an integer from 1 to {2**31 - 1}.")
    return {"id": agent_id, "version": version}


def clean_title(value: object, *, field: str = "title") -> str | None:
    """null, ``""``, or up to 255 characters without control characters (the store-name rules)."""
    if value is None or value == "":
        return value  # type: ignore[return-value]
    return store_validation.clean_name(value, field=field)


def clean_instructions(value: object, *, field: str) -> str | None:
    """null, or a text of at most `INSTRUCTIONS_MAX_CHARS` characters without NUL or lone surrogates."""
    if value is not None and not isinstance(value, str):
        raise InvalidRequest(f"{field}: {not_a('a string or null', value)}")
    return None if value is None else _text(value, field=field, max_chars=INSTRUCTIONS_MAX_CHARS)


def clean_resources(value: object, *, field: str = "resources") -> list[dict[str, Any]]:
    """The session's `resources`: at most 8 `memory_store` items, each store once (SPEC §5).

    Returns ``[{"store_id": UUID, "access": str, "instructions": str | None}, …]`` in request order.
    Another resource type (`file`, `github_repository`) is 400 naming it: only memory stores are mounted
    here. Access to each store is checked by the service, against the store itself.
    """
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidRequest(f"{field}: {not_a('an array of resources', value)}")
    cleaned: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        name = f"{field}[{index}]"
        if not isinstance(item, dict):
            raise InvalidRequest(f"{name}: {not_a('an object', item)}")
        kind = item.get("type")
        if kind != "memory_store":
            raise InvalidRequest(
                f'{name}.type: {quoted(kind)} is not supported; only "memory_store" resources can be attached here.'
            )
        _refuse_unknown(item, {"type", "memory_store_id", "access", "instructions"}, name)
        store_id = clean_id(item.get("memory_store_id"), field=f"{name}.memory_store_id", what="a memory store id")
        access = item.get("access")
        if access is None:
            access = Access.READ_WRITE.value
        elif not isinstance(access, str):
            raise InvalidRequest(f"{name}.access: {not_a('a string or null', access)}")
        elif access not in Access.values:
            raise InvalidRequest(f'{name}.access: must be "read_write", "read_only" or null ("read_write").')
        cleaned.append(
            {
                "store_id": store_id,
                "access": access,
                "instructions": clean_instructions(item.get("instructions"), field=f"{name}.instructions"),
            }
        )
    if len(cleaned) > MAX_ATTACHED_STORES:
        raise InvalidRequest(f"{field}: at most {MAX_ATTACHED_STORES} memory stores per session (got {len(cleaned)}).")
    seen: set[uuid.UUID] = set()
    for index, item in enumerate(cleaned):
        if item["store_id"] in seen:
            raise InvalidRequest(f"{field}[{index}].memory_store_id: this store is already attached to the session.")
        seen.add(item["store_id"])
    return cleaned


_NO_MODEL = "this service never runs a model"
# Why each field this service cannot honour is refused, and the empty value it takes instead (null always
# passes): one wording per field on create and update (`vault_ids` had two).
UNSUPPORTED_FIELDS: dict[str, tuple[str, object]] = {
    "agent": (f"{_NO_MODEL}; a session's agent is fixed when it is created.", {}),
    "budget": (f"{_NO_MODEL}, so there is nothing to budget.", {}),
    "initial_events": ("sessions here carry no event stream; the agent runs on your own worker.", []),
    "vault_ids": ("this service keeps no credential vaults.", []),
}


def reject_unsupported(value: object, *, field: str) -> None:
    """Refuse a session field this service cannot honour (`UNSUPPORTED_FIELDS`: agent on update, budget,
    initial events, vaults) unless it is null or that field's empty value (``{}`` or ``[]``; an object is not
    a list). Raises InvalidRequest ``<field>: not supported — <why>``. KeyError for another field."""
    why, empty = UNSUPPORTED_FIELDS[field]
    if value is None or (type(value) is type(empty) and value == empty):
        return
    raise InvalidRequest(f"{field}: not supported — {why}")


def mount_slug(name: str) -> str:
    """The slug of a store name (SPEC §5): ASCII-lowercased, each run of characters other than ASCII
    letters and digits turned into one hyphen, hyphens trimmed; an empty result is ``store``.

    ``"Demo Memory"`` → ``demo-memory``; ``"Ünïcode!"`` → ``n-code``; ``"!!!"`` → ``store``.
    """
    lowered = "".join(ch.lower() if "A" <= ch <= "Z" else ch for ch in name)
    return _SLUG_RUN.sub("-", lowered).strip("-") or "store"


# A mount's folder name is the slug: at most NAME_MAX (255) bytes on Linux file systems. Slugs are ASCII, so
# bytes and characters agree; a store name may be 255 characters, and its `-2` must still fit.
MAX_SLUG_BYTES = 255


def mount_paths(names: list[str]) -> list[str]:
    """``/mnt/memory/<slug>`` for each name in order; a slug already taken in this session gets ``-2``,
    ``-3``… (the first free suffix). A slug is at most `MAX_SLUG_BYTES` (255) bytes, the suffix included: the
    base is cut (and trailing hyphens trimmed) to make room, so every mount path is a folder a worker can
    create (a 255-character name's ``-2`` made the session unrunnable: ENAMETOOLONG)."""
    taken: set[str] = set()
    paths: list[str] = []
    for name in names:
        base = candidate = mount_slug(name)[:MAX_SLUG_BYTES]
        suffix = 2
        while candidate in taken:
            tail = f"-{suffix}"
            candidate = (base[: MAX_SLUG_BYTES - len(tail)].rstrip("-") or "store") + tail
            suffix += 1
        taken.add(candidate)
        paths.append(f"{MOUNT_ROOT}/{candidate}")
    return paths


# --- work -----------------------------------------------------------------------------------------


def clean_worker_id(value: str | None) -> str:
    """The `Anthropic-Worker-ID` header: 1–200 visible ASCII characters; absent gives ``""``."""
    if value is None:
        return ""
    if len(value) > WORKER_ID_MAX_CHARS or not _WORKER_ID.fullmatch(value):
        raise InvalidRequest(f"Anthropic-Worker-ID: must be 1–{WORKER_ID_MAX_CHARS} visible ASCII characters.")
    return value


def parse_expected_heartbeat(value: str, *, field: str = "expected_last_heartbeat") -> datetime | None:
    """`NO_HEARTBEAT` → None (no heartbeat recorded yet); otherwise the RFC 3339 time the server returned.

    Raises InvalidRequest for anything that is neither (a well-formed time that differs is a 412 later).
    """
    if value == NO_HEARTBEAT:
        return None
    try:
        moment = parse_datetime(value) if _RFC3339.fullmatch(value) else None
    except ValueError:  # well-formed but impossible, such as month 13
        moment = None
    if moment is None or moment.tzinfo is None:
        raise InvalidRequest(
            f"{field}: must be 'NO_HEARTBEAT' or the last_heartbeat the server returned (an RFC 3339 time)."
        )
    return moment


def clamp_ttl(value: int | None, *, low: int, high: int, default: int) -> int:
    """`desired_ttl_seconds` clamped to ``low..high`` (SPEC §5); None gives `default`."""
    return default if value is None else max(low, min(high, value))
