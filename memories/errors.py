"""What can go wrong in the Memories log (SPEC §4). Store-level errors (404, 403, archived) live in stores.errors."""

from __future__ import annotations

from config.errors import Conflict, InvalidRequest, NotFound


class NonceConflict(Conflict):
    """The same `client_nonce` was already used by this author in this store with a different body."""

    reason = "nonce_conflict"
    message = "client_nonce was already used by you in this store with a different body_md."


class StaleGeneration(Conflict):
    """The caller's `generation` is not the store's current one (a forget happened since)."""

    reason = "stale_generation"
    message = "generation does not match the store's current generation; call nap again."


class StaleDigest(Conflict):
    """A child of the range is missing or its text changed since the job was issued."""

    reason = "stale_digest"
    message = "source_digest does not match the range's current children; call nap again."


class SummaryConflict(Conflict):
    """A different live summary already exists for the range."""

    reason = "summary_conflict"
    message = "A different summary already exists for this range."


class InvalidRange(InvalidRequest):
    """Malformed, unaligned or out-of-bounds range (400)."""

    message = "Invalid range."


class SnapshotTooLarge(InvalidRequest):
    """`snapshot` is larger than the store's entry_count (400)."""

    message = "snapshot is larger than the store's entry_count."


class InvalidPattern(InvalidRequest):
    """A recall pattern RE2 rejects, or one over the length / program-size limits (400)."""

    message = "Invalid pattern."


class InvalidCursor(InvalidRequest):
    """A recall cursor that is tampered, expired, or bound to another store, pattern, case flag or caller."""

    message = (
        "cursor: invalid, tampered or expired, or issued for another store, pattern or caller; "
        "use meta.next_cursor as returned."
    )


class EntryNotFound(NotFound):
    """No entry with that seq in the store (seq ≥ entry_count)."""

    message = "Entry not found."


class EntryRedacted(Conflict):
    """A `client_nonce` replay of an entry that has since been redacted (SPEC §4 redact an entry)."""

    reason = "entry_redacted"
    message = "The entry this client_nonce created has been redacted; its text cannot be returned."
