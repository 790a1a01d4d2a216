"""Back-office use-cases: archive with an audited reason (SPEC §6)."""

from __future__ import annotations

from django.db import transaction

from accounts.models import User
from backoffice.errors import ReasonRequired
from backoffice.models import REASON_MAX_CHARS, AuditAction, AuditEvent
from config.text import first_forbidden_char
from stores import services as store_services
from stores.models import Store


def clean_reason(reason: object) -> str:
    """Return the reason stripped of surrounding whitespace: 1–1,000 characters, no NUL/lone surrogates.

    Raises ReasonRequired (400) otherwise.
    """
    if not isinstance(reason, str) or not reason.strip():
        raise ReasonRequired()
    reason = reason.strip()
    if len(reason) > REASON_MAX_CHARS:
        raise ReasonRequired(f"The reason must be at most {REASON_MAX_CHARS} characters (got {len(reason)}).")
    problem = first_forbidden_char(reason)
    if problem:
        raise ReasonRequired(f"The reason {problem}.")
    return reason


@transaction.atomic
def archive_store_with_reason(
    *, store: Store, actor: User, reason: object, request_id: str = ""
) -> tuple[Store, AuditEvent | None]:
    """Archive `store` through the same service the API uses and record an AuditEvent in one transaction.

    Returns ``(store, event)``; `event` is None when the store was already archived (reported, not
    re-archived, nothing recorded). Raises ReasonRequired for an empty or over-long reason.
    """
    reason = clean_reason(reason)
    archived, changed = store_services.archive_store(store=store)
    if not changed:
        return archived, None
    event = AuditEvent.objects.create(
        actor=actor,
        actor_handle=actor.handle,
        action=AuditAction.ARCHIVE_STORE,
        store_id=archived.pk,
        store_name=archived.name,
        reason=reason,
        request_id=request_id,
    )
    return archived, event
