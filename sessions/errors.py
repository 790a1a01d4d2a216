"""What can go wrong with environments, sessions and work (SPEC §5).

Where the anthropic SDK maps an error code to its own exception class (``details.error_code``:
`environment_archived`, `invalid_config_type_change`, `environment_not_found`,
`heartbeat_precondition_failed`), we send that code so SDK users can catch the typed error.
"""

from __future__ import annotations

from typing import Any

from config.errors import AuthenticationError, Conflict, DomainError, InvalidRequest, NotFound
from sessions.models import WorkState


class EnvironmentNotFound(NotFound):
    """Missing, or not the caller's: identical bodies."""

    message = "Environment not found."

    def __init__(self, message: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("details", {"error_code": "environment_not_found"})
        super().__init__(message, **kwargs)


class EnvironmentKeyNotFound(NotFound):
    message = "Environment key not found."


class SessionNotFound(NotFound):
    """Missing, not the caller's, or (for a per-work credential) another session: identical bodies."""

    message = "Session not found."


class WorkNotFound(NotFound):
    message = "Work item not found."


class EnvironmentArchived(InvalidRequest):
    """The SDK types this as a 400 (`BetaEnvironmentArchivedError`)."""

    message = "This environment is archived: it cannot be updated or used for new sessions."

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message, details={"error_code": "environment_archived"})


class InvalidConfigTypeChange(InvalidRequest):
    message = 'config.type: an environment\'s type cannot change; this service serves "self_hosted" only.'

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message, details={"error_code": "invalid_config_type_change"})


class EnvironmentInUse(Conflict):
    reason = "environment_in_use"
    message = "This environment has sessions that are not archived; archive or delete them first."


class SessionArchived(Conflict):
    reason = "session_archived"
    message = "This session is archived (terminated) and read-only."


class WorkStopped(Conflict):
    reason = "work_stopped"
    message = "This work item is already stopped."


class WorkNotClaimed(Conflict):
    reason = "work_not_claimed"
    message = "This work item has not been polled: only a claimed item can be acknowledged."


class WorkAlreadyAcknowledged(Conflict):
    reason = "work_already_acknowledged"
    message = "This work item was acknowledged and has started; it cannot be acknowledged again."


class LeaseExpired(Conflict):
    """A per-work credential without a live lease — its claim ended (reclaimed, lapsed, stopped, archived)
    or its lease has not begun (polled, not yet acknowledged): nothing changed."""

    reason = "lease_expired"
    message = "This work item's lease is not live for this credential (it lapsed, was reclaimed or stopped)."

    @classmethod
    def of(cls, claim_id: Any, work: Any) -> LeaseExpired:
        """The refusal for the claim `claim_id` of `work` (a Work row, or None when it is gone): said as not
        acknowledged yet while that claim still holds the queued item, as ended otherwise."""
        if work is not None and work.claim_id == claim_id and work.state == WorkState.QUEUED:
            return cls(f"This work item's lease has not begun: {not_acknowledged(work)}")
        return cls()


def not_acknowledged(work: Any) -> str:
    """What a claimed, queued `work` item (polled, not acknowledged) needs, with its ids filled in: the words
    of a credential's 409 `lease_expired` and of a heartbeat's 412 before the ack (helper-97, helper-99)."""
    return (
        "the item was claimed but not acknowledged yet; acknowledge it "
        f"(POST /api/v1/environments/{work.environment_id}/work/{work.pk}/ack) before using its credential "
        "or sending heartbeats."
    )


class HeartbeatPreconditionFailed(DomainError):
    """412: `expected_last_heartbeat` is not the server's, or this claim no longer holds the item.

    ``details.current_state`` is the lease as the server holds it (`BetaWorkLeaseState`), which the SDK's
    worker logs before it lets go of the item.
    """

    status, type = 412, "precondition_failed_error"
    message = "expected_last_heartbeat does not match the stored heartbeat; another worker may hold the lease."

    def __init__(self, *, current_state: dict[str, Any], message: str | None = None) -> None:
        super().__init__(
            message,
            details={"error_code": "heartbeat_precondition_failed", "current_state": current_state},
        )


class CredentialNotAccepted(AuthenticationError):
    """An environment key used outside its environment's work endpoints (SPEC §5: 401)."""

    message = "This environment key is not valid here: it authenticates its own environment's work endpoints only."


class EnvironmentKeyRevoked(AuthenticationError):
    """The environment key a blocking poll authenticated with was revoked while the poll waited: the poll
    claims nothing and answers the 401 any request with that key gets now."""

    message = "This environment key has been revoked."


class EnvironmentOwnerInactive(AuthenticationError):
    """The environment's owner was deactivated while a blocking poll waited: the poll claims nothing and
    answers the 401 a new request with the key gets."""

    message = "This environment's owner is inactive."


class EnvironmentKeyGone(AuthenticationError):
    """The environment key a blocking poll authenticated with was deleted (with its environment) while the
    poll waited: the poll claims nothing and answers the 401 of an unknown key, as any new request with it."""

    message = "Invalid environment key."
