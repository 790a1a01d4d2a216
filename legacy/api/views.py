"""Retired flat-record endpoints: every method answers 410 `gone_error` (SPEC §7).

No authentication or scope check runs first: a client with an old, expired or absent token learns
that the endpoint is gone and where the guide is, instead of a misleading 401.
"""

from __future__ import annotations

from rest_framework.views import APIView

from legacy.api.schema import RetiredEndpointSchema
from legacy.errors import LegacyEndpointRetired
from legacy.guide import guide_url


class RetiredEndpointView(APIView):
    """Base of the retired routes. `initial` raises before any handler, so every HTTP method (also
    HEAD, OPTIONS and unknown ones) gets the same 410 with `details.guide_url` and a `Link` header."""

    authentication_classes = ()
    permission_classes = ()
    schema = RetiredEndpointSchema()
    answers_every_request = True  # the 410 even for a GET with a body (config.middleware._read_with_a_body)

    def initial(self, request, *args, **kwargs):
        url = guide_url(request)
        raise LegacyEndpointRetired(details={"guide_url": url})

    def handle_exception(self, exc):
        response = super().handle_exception(exc)
        if isinstance(exc, LegacyEndpointRetired):
            response["Link"] = f'<{exc.details["guide_url"]}>; rel="help"'
        return response

    # The handlers are never reached (`initial` raises); they exist so the OpenAPI document lists
    # each method as a deprecated operation.
    def get(self, request, *args, **kwargs):  # pragma: no cover
        raise LegacyEndpointRetired()

    post = put = patch = delete = get


class RetiredCatchAllView(RetiredEndpointView):
    """Other spellings under the retired prefixes (trailing slash, deeper paths); not in the schema."""

    schema = None
