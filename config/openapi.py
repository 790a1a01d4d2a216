"""`GET /openapi.yaml` (issue 15: the exact contract), served by drf-spectacular's own view."""

from __future__ import annotations

import threading

from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView


class OpenApiDocumentView(SpectacularAPIView):
    """`GET /openapi.yaml`: drf-spectacular's view, generating one document at a time per process.

    drf-spectacular loads its extensions' target classes on first use without a lock: concurrent first
    requests on a fresh worker raced in `OpenApiGeneratorExtension._load_class` (one thread set an optional
    extension's `target_class` to None while another read it as a string) and three of four were 500s (a
    breaker). Generating is rare and takes a second or so; waiting for the one in progress costs nothing.
    """

    _generating = threading.Lock()

    @extend_schema(exclude=True)  # as drf-spectacular's own `get` (SERVE_INCLUDE_SCHEMA is off): not an operation
    def get(self, request, *args, **kwargs):
        with self._generating:
            return super().get(request, *args, **kwargs)
