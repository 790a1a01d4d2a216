"""Schemathesis hooks for the contract run (tests/contract/test_schemathesis.py).

Authentication: every request carries a live API token of the seeded fuzz user. The fuzzer may revoke
the very token it calls with (`DELETE /me/tokens/{id}` is documented to allow it); the token is then
answered 401 and Schemathesis' reactive re-authentication (`retry_on` 401) asks `FreshToken.get` for a
new one and replays the request once. Tokens are issued in-process through `accounts.services`.
"""

from __future__ import annotations

import json
import re
import unicodedata

import schemathesis
from hypothesis import strategies as st

FUZZ_HANDLE = "fuzzer"

# Import bodies are JSON Lines (`application/jsonl`, `application/x-ndjson`: an export file, see
# docs/export-import.md), which Schemathesis cannot generate by itself: lines of small JSON objects,
# and arbitrary bytes.
_JSONL = st.one_of(
    st.binary(max_size=512),
    st.lists(st.dictionaries(st.text(max_size=8), st.text(max_size=16), max_size=3), max_size=4).map(
        lambda rows: "".join(json.dumps(row) + "\n" for row in rows).encode()
    ),
)
for _media_type in ("application/jsonl", "application/x-ndjson"):
    schemathesis.openapi.media_type(_media_type, _JSONL)


@schemathesis.auth(refresh_interval=3600)
class FreshToken:
    """Issue a new all-scopes token for the fuzz user whenever Schemathesis asks for one."""

    def get(self, case, context) -> str:
        from django.db import connection

        from accounts import services
        from accounts.models import User

        try:
            user = User.objects.get(handle=FUZZ_HANDLE)
            return services.issue_token(user=user, scopes=services.ALL_SCOPES, name="fuzz").secret
        finally:
            connection.close()

    def set(self, case, data: str, context) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


# --- failures that are not the API's fault ------------------------------------------------------------
#
# Each rule drops ONE kind of finding, and only when the response shows the documented reason, so a real
# defect of the same operation still fails the run. docs/decisions.md ("The contract run") lists them.

# ST202 "schema-valid request rejected" — a 400 whose message shows a rule OpenAPI 3.0 cannot state:
_INEXPRESSIBLE = (
    # Opaque tokens: valid only if this server signed them for this list and query. Their shape
    # (pattern, maxLength) is documented and enforced; no schema can describe a valid HMAC.
    ("cursor", "cursor: "),
    ("page", "page: "),
    # OpenAPI 3.0 cannot say "ref, or scope/subject, not both" (resolve).
    ("ref", "ref: Use either ref or scope/subject"),
    # Lengths in UTF-8 bytes (maxLength counts characters): SPEC §9 measures text in bytes.
    (None, "UTF-8 bytes; the limit is"),
    # Unicode NFC (memory paths are never normalised for you, SPEC §5): no pattern can test it.
    (None, "must be in Unicode NFC form"),
    # NUL and lone surrogates are refused in every string, path and query of the API (SPEC §2).
    (None, "ontains a NUL character"),  # "Contains …" in a field's message, "… contains …" in a key's
    (None, "a lone surrogate"),
    # Metadata keys: 1–64 characters without control characters; OpenAPI 3.0 has no `propertyNames`.
    (None, "metadata: keys "),
    # "." and ".." path segments (a lookahead pattern would say it, but Schemathesis cannot generate from one).
    (None, "must not contain a '.' or '..' segment"),
    # OpenAPI 3.0 cannot make `subject` required when `scope` is not `user` (its default, `me`, is a user).
    (None, "names a user; scope"),
    # Archived environments are a 400 because the anthropic SDK types them so (BetaEnvironmentArchivedError).
    (None, "This environment is archived"),
    # Tag characters (U+E0020–U+E007F) only in the flags of England, Scotland and Wales (a name rule): astral
    # code points, which an OpenAPI (ECMA-262, non-Unicode) pattern cannot name.
    (None, "a tag character outside the flag of England, Scotland or Wales"),
)
_FORMAT_CHAR = re.compile(r"U\+([0-9A-F]{4,6}) \(a control, format or separator character\)")


def _error_message(response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except Exception:
        return ""


def _inexpressible(case, message: str) -> bool:
    query = case.query or {}
    # An import body is an export file (JSON Lines with a header, typed lines and a SHA-256 chain,
    # docs/export-import.md): its validity is not a JSON Schema; the 400 names the offending line.
    if case.operation.path.startswith("/api/v1/memories/imports") and re.match(r"line \d+: ", message):
        return True
    for parameter, fragment in _INEXPRESSIBLE:
        if fragment in message and (parameter is None or parameter in query):
            return True
    # A format (Cf) character outside the Basic Multilingual Plane: the documented path pattern excludes
    # the BMP ones; an OpenAPI (ECMA-262, non-Unicode) pattern cannot name astral code points.
    found = _FORMAT_CHAR.search(message)
    return (
        bool(found) and int(found.group(1), 16) > 0xFFFF and unicodedata.category(chr(int(found.group(1), 16))) == "Cf"
    )


@schemathesis.hook
def filter_failure(context, failure, case, response) -> bool:
    """Keep every failure except the documented limits above (True keeps it)."""
    if failure.code == "ST202" and response.status_code == 400:
        return not _inexpressible(case, _error_message(response))
    # ST201 "schema-violating request accepted": a 414 IS a rejection — the HTTP layer refuses a request
    # line over 8 KiB (documented on every operation) before the application sees it — but it is not in
    # Schemathesis' list of rejection statuses.
    # The same for a 413: the body is over the 1 MiB request ceiling (SPEC §2), refused unread.
    return not (failure.code == "ST201" and response.status_code in (413, 414))
