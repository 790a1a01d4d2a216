"""`GET /api/v1/me`: who the bearer token belongs to (lets clients such as the CLI learn their handle)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.views import APIView

from config.api import envelope

MeSerializer = inline_serializer(
    name="MeEnvelope",
    fields={
        "data": inline_serializer(
            name="Me",
            fields={
                "id": serializers.UUIDField(),
                "handle": serializers.CharField(),
                "token": inline_serializer(
                    name="MeToken",
                    fields={
                        "id": serializers.UUIDField(),
                        "prefix": serializers.CharField(),
                        "scopes": serializers.ListField(child=serializers.CharField()),
                        "expires_at": serializers.DateTimeField(allow_null=True),
                    },
                ),
            },
        ),
        "meta": serializers.DictField(),
    },
)


class MeView(APIView):
    """The caller's identity and token (never the secret)."""

    @extend_schema(operation_id="get_me", responses={200: MeSerializer}, tags=["accounts"])
    def get(self, request):
        token = request.auth
        return envelope(
            {
                "id": str(request.user.id),
                "handle": request.user.handle,
                "token": {
                    "id": str(token.id),
                    "prefix": token.prefix,
                    "scopes": list(token.scopes),
                    "expires_at": token.expires_at.isoformat() if token.expires_at else None,
                },
            }
        )
