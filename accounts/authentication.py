"""`Authorization: Bearer <token>` for DRF (SPEC §2)."""

from __future__ import annotations

from django.conf import settings
from rest_framework import authentication, exceptions

from accounts.models import ApiToken
from accounts.services import token_digest, touch_token
from config.compiled import CompiledLateral, CompiledQuery
from config.fields import canonical_uuid
from stores.selectors import STORE_FOR_USER, prefetch_store

# Compiled once per process (config/compiled.py): only the digest changes per request.
_TOKEN_BY_DIGEST = CompiledQuery(
    lambda digest: ApiToken.objects.select_related("user").filter(digest=digest)[:1],
    digest="compiled-query-sentinel:token-digest",
)
# The token and, for a view with `store_kwarg`, the store its user may read, in one statement (issue 17):
# both queries are the ones above/in stores.selectors; the store's user id is the token's user_id column.
_TOKEN_WITH_STORE = CompiledLateral(_TOKEN_BY_DIGEST, STORE_FOR_USER, bind={"user_id": "user_id"})


def _store_in_path(request):
    """The store id in the URL of a view that names one (`store_kwarg`, e.g. ``"pk"``), as a UUID; else None."""
    context = getattr(request, "parser_context", None) or {}
    name = getattr(context.get("view"), "store_kwarg", None)
    if name is None:
        return None
    return canonical_uuid((context.get("kwargs") or {}).get(name))


# Anthropic's own API takes its key as `x-api-key` (its curl examples do), so a raw client may send our token
# that way. Taken for an anonymous request, it made a private store a 404 with no word about the key; said
# plainly instead, and never read as a credential (a token in two headers would be two ways to log or leak
# it). With an Authorization header too, X-Api-Key is ignored. (The anthropic SDK sends `api_key=` and
# `auth_token=` both as Authorization: Bearer to this server.)
X_API_KEY_REFUSED = "Send your token as 'Authorization: Bearer <token>', not as X-Api-Key."


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """Authenticate by API token; returns ``(user, token)`` or None when no Authorization header is sent.
    An ``X-Api-Key`` header without an Authorization header is a 401 (`X_API_KEY_REFUSED`), never anonymous.

    Raises AuthenticationFailed (401) for a malformed header, an unknown, revoked or expired token,
    or an inactive user. One query (token joined to its user) — which, for a view naming a store in its
    URL (`store_kwarg`), also runs the store access query for the token's user (`prefetch_store`), so the
    view's `get_store_for` needs no query of its own. The checks below are unchanged by it.
    """

    keyword = "bearer"

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION")
        if header is None:
            if "HTTP_X_API_KEY" in request.META:
                raise exceptions.AuthenticationFailed(X_API_KEY_REFUSED)
            return None
        parts = header.split()
        if len(parts) != 2 or parts[0].lower() != self.keyword:
            raise exceptions.AuthenticationFailed("Malformed Authorization header; expected 'Bearer <token>'.")
        secret = parts[1]
        store_id = _store_in_path(request)
        if store_id is None:
            token = _TOKEN_BY_DIGEST.first(digest=token_digest(secret))
        else:
            token, store = _TOKEN_WITH_STORE.first(digest=token_digest(secret), pk=store_id)
            if token is not None:
                prefetch_store(token.user, store_id, store)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid API token.")
        if token.revoked_at is not None:
            raise exceptions.AuthenticationFailed("This API token has been revoked.")
        if not token.is_usable():
            raise exceptions.AuthenticationFailed("This API token has expired.")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("This account is inactive.")
        touch_token(token=token, resolution_seconds=settings.TOKEN_LAST_USED_RESOLUTION)
        return token.user, token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="api"'
