"""What can go wrong when a store is imported (SPEC §8b): each error is rendered by config/errors.py."""

from __future__ import annotations

from typing import Any

from config.errors import Conflict, InvalidRequest, NotFound, PermissionError_


class ImportInvalid(InvalidRequest):
    """The file is malformed, truncated or inconsistent at `line` (400; ``details.line``). Nothing is kept."""

    message = "The import file is invalid."

    def __init__(self, line: int, problem: str, **details: Any) -> None:
        super().__init__(f"line {line}: {problem}", details={"line": line, **details})


class UnknownHandles(InvalidRequest):
    """Handles the file names that no user on this server has; reported all at once, nothing imported."""

    message = "The file names users that do not exist on this server."


class StoreNotEmpty(Conflict):
    reason = "store_not_empty"
    message = "An import can only fill an empty store."


class ImportNotFound(NotFound):
    message = "Import not found."


class ImportForbidden(PermissionError_):
    """The caller no longer holds the owner right on the subject its open import fills (403): a chunk is
    refused and changes nothing; the import can still be aborted (or it expires when idle)."""

    message = "You no longer own the subject this import fills; nothing was written. Abort the import."


class ImportOffsetMismatch(Conflict):
    reason = "import_offset_mismatch"
    message = "from_line is not the next line this import expects; resume from details.next_line."


class ImportCommitted(Conflict):
    reason = "import_committed"
    message = "This import is complete; its store is details.store_id."


class ImportWritersChanged(Conflict):
    reason = "import_writers_changed"
    message = (
        "Someone this import may name as an author lost the right to write here while the chunk was imported: "
        "nothing of the chunk was written. Send it again."
    )
