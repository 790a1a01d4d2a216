"""Bearer authentication for the credentials this app issues (SPEC §5): environment keys (``menv_…``) and
per-work credentials (``mwork_…``). API tokens (``mem_…``) are left to `accounts.authentication`.

`request.auth` becomes the `EnvironmentKey` or the `WorkClaim` (whose `.session` is the session acting),
`request.user` the environment's or session's owner. Which endpoints accept which credential is decided by
each view's `accepted_credentials` (`accounts.permissions.ScopedAccess`); a claim that has ended still
authenticates, so each endpoint can say why it refuses (409 lease_expired, 412 on heartbeats).
"""

from __future__ import annotations

from django.conf import settings
from rest_framework import authentication, exceptions

from accounts.services import token_digest, touch_token
from sessions.models import ENVIRONMENT_KEY_PREFIX, WORK_CREDENTIAL_PREFIX
from sessions.selectors import claim_by_digest, environment_key_by_digest


class AgentCredentialAuthentication(authentication.BaseAuthentication):
    """Authenticate ``Authorization: Bearer menv_…`` / ``mwork_…``; None for anything else.

    Raises AuthenticationFailed (401) for an unknown or revoked key, an unknown credential, or an
    inactive owner. One query.
    """

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION")
        parts = header.split() if header else []
        if len(parts) != 2 or parts[0].lower() != "bearer":
            return None
        secret = parts[1]
        if secret.startswith(ENVIRONMENT_KEY_PREFIX):
            key = environment_key_by_digest(token_digest(secret))
            if key is None:
                raise exceptions.AuthenticationFailed("Invalid environment key.")
            if key.revoked_at is not None:
                raise exceptions.AuthenticationFailed("This environment key has been revoked.")
            owner = key.environment.owner
            if not owner.is_active:
                raise exceptions.AuthenticationFailed("This environment's owner is inactive.")
            touch_token(token=key, resolution_seconds=settings.TOKEN_LAST_USED_RESOLUTION)
            return owner, key
        if secret.startswith(WORK_CREDENTIAL_PREFIX):
            claim = claim_by_digest(token_digest(secret))
            if claim is None:
                raise exceptions.AuthenticationFailed("Invalid work credential.")
            owner = claim.work.session.owner
            if not owner.is_active:
                raise exceptions.AuthenticationFailed("This session's owner is inactive.")
            return owner, claim
        return None

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="api"'
