"""Store field rules shared by both surfaces (SPEC §3, §9): name, description, metadata, visibility."""

from __future__ import annotations

import re
import unicodedata

from config.errors import InvalidRequest
from config.fields import JSON_TYPE_NAMES, json_type_of, not_a, not_a_string
from config.text import first_forbidden_char, quoted
from stores.models import (
    DESCRIPTION_MAX_CHARS,
    METADATA_KEY_MAX_CHARS,
    METADATA_MAX_PAIRS,
    METADATA_VALUE_MAX_CHARS,
    NAME_MAX_CHARS,
)


def _has_control(text: str, *, multiline: bool = False) -> bool:
    """Control (Cc) characters, and the line and paragraph separators U+2028/U+2029: a name is one line —
    a store name with U+2028 forged lines of the worker's system context (a breaker). `multiline` lets
    line feeds, carriage returns and tabs through (a written reason)."""
    allowed = "\n\r\t" if multiline else ""
    return any(unicodedata.category(ch) in ("Cc", "Zl", "Zp") and ch not in allowed for ch in text)


def _format_character_allowed(ch: str) -> bool:
    """The format (Cf) characters a name may hold: ZWNJ and ZWJ (Persian and Indic spelling, emoji sequences)
    and the tag characters of subdivision flags (U+E0020–U+E007F; where they may stand: `_misplaced_tag`).
    Every other one is invisible, and the bidirectional controls (U+202A–U+202E, U+2066–U+2069,
    U+200E/U+200F, U+061C) make a name display as another (`"evil\u202egpj.md"` shows as "evildm.jpg")."""
    return ch in "\u200c\u200d" or "\U000e0020" <= ch <= "\U000e007f"


# The emoji tag sequences that show as something (UTS #51 ED-14a; the only use of tag characters): the black flag
# U+1F3F4, a subdivision code in tag letters, the cancel tag U+E007F. Only the three "recommended for general
# interchange" flags — England, Scotland, Wales — are drawn by common fonts; any other code shows as the bare
# black flag, so "Team🏴" + tags "a" + cancel looked exactly like "Team🏴" (a breaker).
_FLAG_CODES = ("gbeng", "gbsct", "gbwls")
_TAG_SEQUENCE = re.compile(
    "\U0001f3f4(?:" + "|".join("".join(chr(0xE0000 + ord(c)) for c in code) for code in _FLAG_CODES) + ")\U000e007f"
)
_TAG = re.compile("[\U000e0020-\U000e007f]")


def _misplaced_tag(value: str) -> str | None:
    """The first tag character of `value` outside the flag of England, Scotland or Wales, or None. Anywhere
    else a tag shows nothing and makes two names that look the same differ ("x" and U+E0020 + "x", "🏴" and
    "🏴" + an unknown subdivision code: breakers)."""
    found = _TAG.search(_TAG_SEQUENCE.sub("", value))
    return found.group() if found else None


# Characters that show nothing although they are not spaces: the default-ignorable ones a name may hold (ZWNJ,
# ZWJ, the combining grapheme joiner, variation selectors, Hangul fillers, Khmer inherent vowels, tags) and
# the Braille blank. A name of only these and spaces looked blank in the directory (a breaker).
_INVISIBLE = frozenset(
    "\u034f\u115f\u1160\u17b4\u17b5\u200c\u200d\u2065\u2800\u3164\uffa0\U0001107f\U00016fe4"
) | frozenset(
    map(chr, [*range(0x180B, 0x1810), *range(0xFE00, 0xFE10), *range(0xFFF0, 0xFFF9), *range(0xE0000, 0xE1000)])
)


def _visible(ch: str) -> bool:
    return not ch.isspace() and ch not in _INVISIBLE and unicodedata.category(ch) != "Cf"


def name_problem(value: str, *, multiline: bool = False) -> str | None:
    """What is wrong with a display name's characters (a lowercase sentence naming no field), or None.

    Refused: control (Cc) characters, lone surrogates, U+2028/U+2029 (a name is one line: a store name with
    U+2028 forged lines of the worker's system context), format (Cf) characters other than those
    `_format_character_allowed` keeps (a bidi override spoofed names in the public directory), a name with
    no visible character (spaces, joiners, fillers, the Braille blank only), and tag characters outside the
    flags of England, Scotland and Wales (`_misplaced_tag`). Names are never normalised or trimmed. The schema's
    `config.fields.NAME_PATTERN` says the same for the Basic Multilingual Plane (a JSON Schema pattern has
    no portable way to name other planes' characters).
    `multiline`: the same rule for a text of several lines (a written reason: line breaks and tabs allowed).
    """
    if first_forbidden_char(value) or _has_control(value, multiline=multiline):
        if multiline:
            return "must not contain control characters other than line breaks and tabs."
        return "must not contain control characters or line separators."
    for ch in value:
        if unicodedata.category(ch) == "Cf" and not _format_character_allowed(ch):
            return (
                f"must not contain U+{ord(ch):04X}, an invisible formatting character (they hide text or, as "
                "bidirectional controls do, make a name display as another)."
            )
    if not any(map(_visible, value)):
        return "must contain a visible character (not only spaces, joiners or blank characters)."
    tag = _misplaced_tag(value)
    if tag is not None:
        return (
            f"must not contain U+{ord(tag):04X}, a tag character outside the flag of England, Scotland or Wales: "
            "anywhere else it is invisible."
        )
    return None


def clean_name(value: object, *, field: str = "name", max_chars: int = NAME_MAX_CHARS) -> str:
    """Return a valid store name: a string of 1–255 characters that `name_problem` finds nothing wrong with
    (no control characters, line separators, invisible formatting characters; a visible character).

    The one rule for every name-like text (environment names, session titles, environment key names, a
    summary's model); `max_chars` lowers the bound for the shorter ones. Raises InvalidRequest naming `field`
    (another JSON type in JSON's words, as `config.api.StrictSerializer` says it: "Must be a string, not null.").
    """
    if not isinstance(value, str):
        raise InvalidRequest(f"{field}: {not_a_string(value)}")
    if not 1 <= len(value) <= max_chars:
        raise InvalidRequest(f"{field}: must be 1–{max_chars} characters (got {len(value)}).")
    problem = name_problem(value)
    if problem:
        raise InvalidRequest(f"{field}: {problem}")
    return value


def clean_description(value: object, *, field: str = "description") -> str:
    """Return a valid Markdown description: a string of at most 1,024 characters (newlines allowed)."""
    if not isinstance(value, str):
        raise InvalidRequest(f"{field}: {not_a_string(value)}")
    if len(value) > DESCRIPTION_MAX_CHARS:
        raise InvalidRequest(f"{field}: must be at most {DESCRIPTION_MAX_CHARS} characters (got {len(value)}).")
    problem = first_forbidden_char(value)
    if problem:
        raise InvalidRequest(f"{field}: {problem}.")
    return value


# `details.error_code` of every metadata refusal: the anthropic SDK maps it to `BetaInvalidMetadataError`.
INVALID_METADATA = "invalid_metadata"


def _metadata_error(field: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"{field}: {message}", details={"error_code": INVALID_METADATA})


def _check_metadata_key(key: object, field: str) -> str:
    if not isinstance(key, str) or not 1 <= len(key) <= METADATA_KEY_MAX_CHARS:
        raise _metadata_error(field, f"keys must be 1–{METADATA_KEY_MAX_CHARS} characters.")
    if first_forbidden_char(key) or _has_control(key):
        raise _metadata_error(field, "keys must not contain control characters or lone surrogates.")
    return key


def clean_metadata(value: object, *, field: str = "metadata") -> dict[str, str]:
    """Return valid metadata: at most 16 string pairs, keys 1–64 chars, values at most 512 chars; neither
    keys nor values may hold control (Cc) characters, line separators or lone surrogates (the rule of store
    names).

    Raises InvalidRequest with ``details.error_code = "invalid_metadata"`` (what the anthropic SDK maps).
    """
    if not isinstance(value, dict):
        raise _metadata_error(field, not_a("an object", value))
    if len(value) > METADATA_MAX_PAIRS:
        raise _metadata_error(field, f"at most {METADATA_MAX_PAIRS} pairs (got {len(value)}).")
    for key, item in value.items():
        _check_metadata_key(key, field)
        name = quoted(key)
        if not isinstance(item, str):
            kind = JSON_TYPE_NAMES[json_type_of(item)]
            raise _metadata_error(field, f"value of {name} must be a string, not {kind}.")
        if len(item) > METADATA_VALUE_MAX_CHARS:
            raise _metadata_error(field, f"value of {name} must be at most {METADATA_VALUE_MAX_CHARS} characters.")
        if first_forbidden_char(item) or _has_control(item):
            raise _metadata_error(field, f"value of {name} must not contain control characters or lone surrogates.")
    return dict(value)


# A patch may delete every one of the 16 pairs and set 16 new ones: 32 keys is the most a useful patch holds.
METADATA_PATCH_MAX_KEYS = 2 * METADATA_MAX_PAIRS


def patch_metadata(
    current: dict[str, str], patch: object, *, field: str = "metadata", empty_deletes: bool = False
) -> dict[str, str]:
    """Merge a metadata patch (`{key: str | None}`; None — and "" when `empty_deletes` — deletes the key)
    into `current` and return the validated result (≤16 pairs, keys 1–64, values ≤512 characters).

    The patch itself is judged before it is applied: an object of at most 32 keys (`METADATA_PATCH_MAX_KEYS`),
    every key — one that deletes included — following the key rule, every value a string or null. A delete
    of a key that could never be stored was a silent no-op (a breaker): it is a 400 like the set would be.
    The one merge rule for stores (SPEC §5 update), environments, sessions and work items.

    Raises InvalidRequest with ``details.error_code = "invalid_metadata"`` (SDK `BetaInvalidMetadataError`).
    """
    if not isinstance(patch, dict):
        raise _metadata_error(field, not_a("an object", patch))
    if len(patch) > METADATA_PATCH_MAX_KEYS:
        raise _metadata_error(field, f"a patch holds at most {METADATA_PATCH_MAX_KEYS} keys (got {len(patch)}).")
    merged = dict(current)
    for key, value in patch.items():
        _check_metadata_key(key, field)
        if value is None or (empty_deletes and value == ""):
            merged.pop(key, None)
        elif isinstance(value, str):
            merged[key] = value
        else:
            kind = JSON_TYPE_NAMES[json_type_of(value)]
            message = f"value of {quoted(key)} must be a string, or null to delete the key; not {kind}."
            raise _metadata_error(field, message)
    return clean_metadata(merged, field=field)


def clean_visibility(value: object, *, field: str = "visibility") -> str:
    """Return ``"private"`` or ``"public"``; anything else raises InvalidRequest."""
    if value not in ("private", "public"):
        raise InvalidRequest(f'{field}: must be "private" or "public".')
    return value  # type: ignore[return-value]
