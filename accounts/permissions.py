"""Scope checks (SPEC §2): reads need `agent:read`; writes need `agent:read` and `memories:write`."""

from __future__ import annotations

from rest_framework import exceptions, permissions

from accounts.models import ApiToken, TokenScope

READ_SCOPES = frozenset({TokenScope.AGENT_READ.value})
WRITE_SCOPES = frozenset({TokenScope.AGENT_READ.value, TokenScope.MEMORIES_WRITE.value})


def token_scopes(auth) -> frozenset[str]:
    """Scopes carried by the request's credential (`request.auth`); empty for anonymous requests."""
    if isinstance(auth, ApiToken):
        return frozenset(auth.scopes)
    return frozenset(getattr(auth, "scopes", ()) or ())


class ScopedAccess(permissions.BasePermission):
    """The default permission of every API view.

    - Anonymous: only safe methods, and only on views with ``allow_anonymous_reads = True``; otherwise 401.
    - Authenticated: safe methods need `agent:read`; others need `agent:read` + `memories:write`; else 403
      naming the missing scope. Store-level rights (read/write/owner) are checked by the stores policy.
    """

    def has_permission(self, request, view) -> bool:
        safe = request.method in permissions.SAFE_METHODS
        if request.auth is None:
            if safe and getattr(view, "allow_anonymous_reads", False):
                return True
            raise exceptions.NotAuthenticated("Authentication required: send 'Authorization: Bearer <token>'.")
        needed = READ_SCOPES if safe else WRITE_SCOPES
        missing = sorted(needed - token_scopes(request.auth))
        if missing:
            raise exceptions.PermissionDenied(f"This token lacks the scope(s): {', '.join(missing)}.")
        return True
