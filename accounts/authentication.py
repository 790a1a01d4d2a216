"""`Authorization: Bearer <token>` for DRF (SPEC §2)."""

from __future__ import annotations

from django.conf import settings
from rest_framework import authentication, exceptions

from accounts.models import ApiToken
from accounts.services import token_digest, touch_token
from config.compiled import CompiledQuery

# Compiled once per process (config/compiled.py): only the digest changes per request.
_TOKEN_BY_DIGEST = CompiledQuery(
    lambda digest: ApiToken.objects.select_related("user").filter(digest=digest)[:1],
    digest="compiled-query-sentinel:token-digest",
)


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """Authenticate by API token; returns ``(user, token)`` or None when no Authorization header is sent.

    Raises AuthenticationFailed (401) for a malformed header, an unknown, revoked or expired token,
    or an inactive user. One query (token joined to its user).
    """

    keyword = "bearer"

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION")
        if header is None:
            return None
        parts = header.split()
        if len(parts) != 2 or parts[0].lower() != self.keyword:
            raise exceptions.AuthenticationFailed("Malformed Authorization header; expected 'Bearer <token>'.")
        secret = parts[1]
        token = _TOKEN_BY_DIGEST.first(digest=token_digest(secret))
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
