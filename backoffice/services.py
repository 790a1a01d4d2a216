"""Audit events (SPEC §6) and the back-office use-cases: archive with an audited reason."""

from __future__ import annotations

from django.db import transaction

from accounts.models import User
from backoffice.errors import ReasonRequired
from backoffice.models import REASON_MAX_CHARS, AuditAction, AuditEvent
from stores import services as store_services
from stores.models import Store
from stores.validation import name_problem


def clean_reason(reason: object) -> str:
    """Return the reason stripped of surrounding whitespace: 1–1,000 characters of written text — the name
    rule on several lines (`stores.validation.name_problem`, multiline): no control characters but line
    breaks and tabs, no NUL or lone surrogates, no invisible formatting characters (bidirectional
    controls), and a visible character (a reason of one zero-width space or Hangul filler archived a store
    — a tester). The archive's and the redactions' reason alike (SPEC §3, §6).

    Raises ReasonRequired (400) otherwise.
    """
    if not isinstance(reason, str) or not reason.strip():
        raise ReasonRequired()
    reason = reason.strip()
    if len(reason) > REASON_MAX_CHARS:
        raise ReasonRequired(f"reason: must be at most {REASON_MAX_CHARS} characters (got {len(reason)}).")
    problem = name_problem(reason, multiline=True)
    if problem:
        raise ReasonRequired(f"reason: {problem}")
    return reason


def record_event(
    *,
    actor: User,
    action: str,
    store: Store,
    reason: str,
    seq: int | None = None,
    details: dict | None = None,
    request_id: str = "",
) -> AuditEvent:
    """Append one AuditEvent (call inside the transaction of the action it records).

    reason: already cleaned (`clean_reason`). details: metadata only — never entry, summary or file text.
    """
    return AuditEvent.objects.create(
        actor=actor,
        actor_handle=actor.handle,
        action=action,
        store_id=store.pk,
        store_name=store.name,
        reason=reason,
        seq=seq,
        details=details or {},
        request_id=request_id,
    )


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
    event = record_event(
        actor=actor, action=AuditAction.ARCHIVE_STORE, store=archived, reason=reason, request_id=request_id
    )
    return archived, event
