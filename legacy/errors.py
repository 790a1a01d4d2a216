"""What the legacy surface answers (SPEC §7)."""

from __future__ import annotations

from config.errors import Gone


class LegacyEndpointRetired(Gone):
    """410 gone_error for every retired flat-record endpoint; `details.guide_url` points at the guide."""

    message = (
        "The flat-records API was retired in contract 2.0.0. Your records now live as entries in your "
        "private Memories store; see the Memories guide."
    )
