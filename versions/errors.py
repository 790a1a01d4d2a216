"""What can go wrong with file memories and versions (SPEC §5). Store-level errors live in `stores.errors`."""

from __future__ import annotations

import uuid

from config.errors import Conflict, DomainError, InvalidRequest, NotFound, PermissionError_
from config.text import quoted


class MemoryNotFound(NotFound):
    """No current memory with that id in that store (also: a malformed id, or a deleted memory)."""

    message = "Memory not found."


class VersionNotFound(NotFound):
    message = "Memory version not found."


class MemoryPreconditionFailed(DomainError):
    """The memory's current `content_sha256` is not the one the request expected; nothing changed."""

    status, type = 409, "memory_precondition_failed_error"
    message = "The memory's content_sha256 does not match the precondition; nothing was changed."


class MemoryPathConflict(DomainError):
    """The path is held by, or is an ancestor or descendant of, a current memory's path.

    Carries ``conflicting_memory_id`` and ``conflicting_path`` inside ``error`` (the blocking memory's).
    """

    status, type = 409, "memory_path_conflict_error"
    message = "The path conflicts with an existing memory."

    def __init__(self, *, memory_id: uuid.UUID, path: str, requested: str) -> None:
        if path == requested:
            message = f"A memory already exists at {quoted(path)}."
        elif path.startswith(requested + "/"):
            message = f"{quoted(requested)} is an ancestor of the existing memory {quoted(path)}."
        else:
            message = f"{quoted(requested)} is below the existing memory {quoted(path)}."
        super().__init__(message, extra={"conflicting_memory_id": str(memory_id), "conflicting_path": path})


class MemoryLimitReached(Conflict):
    reason = "memory_limit"
    message = "This store holds the maximum number of memories; delete one before creating another."


class VersionIsCurrent(Conflict):
    reason = "version_is_current"
    message = "This version is the current content of a live memory; write a new version or delete the memory first."


class RedactionNeedsAPerson(PermissionError_):
    """A session's work credential asked to redact a version (403): redaction erases history for good, and
    versions are what lets a person undo an agent's writes, so only API tokens of people may redact."""

    message = (
        "A session's work credential cannot redact versions: redaction erases history for good, so it takes "
        "an API token of a person with write access to the store."
    )


class InvalidPage(InvalidRequest):
    message = "page: not a valid page token for this list."
