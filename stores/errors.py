"""What can go wrong with stores (SPEC §3)."""

from __future__ import annotations

from config.errors import Conflict, NotFound, PermissionError_


class StoreNotFound(NotFound):
    """Missing *or unreadable*: the body is identical in both cases (SPEC §2)."""

    message = "Store not found."


class StoreWriteForbidden(PermissionError_):
    """A reader without the write right (`details.reason` lets clients such as rog say how to get it)."""

    reason = "write_right_required"
    message = "You can read this store but not write to it."


class StoreOwnerRequired(PermissionError_):
    message = "Only the store's owner can do that."


class SubjectWriteForbidden(PermissionError_):
    """The caller can see the subject (user, project, section) but may not write its store (ensure)."""

    message = "You can see this subject but may not write to its store."


class StoreArchived(Conflict):
    reason = "store_archived"
    message = "This store is archived and read-only."


class MembershipGoverned(Conflict):
    reason = "membership_governed"
    message = "Access to project and board stores follows project/section membership; share applies to user stores."


class StoreAttached(Conflict):
    reason = "store_attached"
    message = "This store is attached to a session that has not ended."


class StaleConfirmation(Conflict):
    reason = "stale_confirmation"
    message = "expected_entry_count and generation must match the store's current values."


class SubjectNotFound(NotFound):
    """An unknown or unreadable user handle, project or section (named in the message)."""

    message = "Not found."
