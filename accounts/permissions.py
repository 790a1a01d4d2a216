"""Scope checks (SPEC §2): reads need `agent:read`; writes need `agent:read` and `memories:write`.

Which credentials a view accepts is its `accepted_credentials` (default: API tokens only). The agent
credentials of SPEC §5 — environment keys and per-work credentials — carry a `credential_kind` and no
scopes: a view that accepts one checks that credential's reach itself; every other view answers 401.
"""

from __future__ import annotations

from rest_framework import exceptions, permissions

from accounts.models import ApiToken, TokenScope

READ_SCOPES = frozenset({TokenScope.AGENT_READ.value})
WRITE_SCOPES = frozenset({TokenScope.AGENT_READ.value, TokenScope.MEMORIES_WRITE.value})

API_TOKEN = "api_token"  # noqa: S105 (a credential kind, not a secret)
DEFAULT_CREDENTIALS = (API_TOKEN,)
_KIND_NAMES = {
    API_TOKEN: "an API token",
    "environment_key": "an environment key",
    "work_credential": "a per-work credential",
}


def token_scopes(auth) -> frozenset[str]:
    """Scopes carried by the request's credential (`request.auth`); empty for anonymous requests."""
    if isinstance(auth, ApiToken):
        return frozenset(auth.scopes)
    return frozenset(getattr(auth, "scopes", ()) or ())


def credential_kind(auth) -> str | None:
    """``"api_token"``, the `credential_kind` of an agent credential, or None for anonymous requests."""
    if auth is None:
        return None
    return API_TOKEN if isinstance(auth, ApiToken) else getattr(auth, "credential_kind", None)


def accepted_credentials(view, method: str) -> tuple[str, ...]:
    """The credential kinds `view` accepts for `method`: its `accepted_credentials` — a tuple, or a dict by
    HTTP method (missing methods: API tokens only) — and API tokens only when it has none."""
    accepted = getattr(view, "accepted_credentials", DEFAULT_CREDENTIALS)
    if isinstance(accepted, dict):
        accepted = accepted.get(method.upper(), DEFAULT_CREDENTIALS)
    return tuple(accepted)


class ScopedAccess(permissions.BasePermission):
    """The default permission of every API view.

    - Anonymous: only safe methods, and only on views with ``allow_anonymous_reads = True``; otherwise 401.
    - A credential the view does not accept (an environment key on a memory endpoint, an API token on a
      poll): 401 naming what the endpoint takes.
    - API token: safe methods need `agent:read`; others need `agent:read` + `memories:write`; else 403
      naming the missing scope. A view may narrow that for a request with a method
      ``scopes_needed(request) -> frozenset[str]`` (revoking the token you call with). Store-level rights
      (read/write/owner) are checked by the stores policy.
    """

    def has_permission(self, request, view) -> bool:
        safe = request.method in permissions.SAFE_METHODS
        if request.auth is None:
            if safe and getattr(view, "allow_anonymous_reads", False):
                return True
            raise exceptions.NotAuthenticated("Authentication required: send 'Authorization: Bearer <token>'.")
        kind = credential_kind(request.auth)
        accepted = accepted_credentials(view, request.method)
        if kind not in accepted:
            wanted = " or ".join(_KIND_NAMES.get(k, k) for k in accepted)
            raise exceptions.NotAuthenticated(
                f"This endpoint does not accept {_KIND_NAMES.get(kind, 'this credential')}; it takes {wanted}."
            )
        if kind != API_TOKEN:
            return True
        scopes_needed = getattr(view, "scopes_needed", None)
        needed = scopes_needed(request) if scopes_needed else READ_SCOPES if safe else WRITE_SCOPES
        missing = sorted(needed - token_scopes(request.auth))
        if missing:
            raise exceptions.PermissionDenied(f"This token lacks the scope(s): {', '.join(missing)}.")
        return True
