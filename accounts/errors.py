"""What can go wrong with projects, sections, memberships and tokens (SPEC §3)."""

from __future__ import annotations

from config.errors import Conflict, NotFound, PermissionError_


class ProjectNotFound(NotFound):
    """Missing *or not visible to the caller*: the body is identical in both cases (SPEC §2)."""

    message = "Project not found."


class SectionNotFound(NotFound):
    """Missing or not visible to the caller (identical bodies)."""

    message = "Section not found."


class TokenNotFound(NotFound):
    """Not one of the caller's tokens (someone else's token is exactly as missing as an unknown id)."""

    message = "Token not found."


class UserNotFound(NotFound):
    """An unknown handle (or an inactive user where an active one is needed), named in the message."""

    message = "User not found."


class MembershipRequired(PermissionError_):
    message = "Only active members can do that."


class OwnerRequired(PermissionError_):
    message = "Only an owner can do that."


class StaffRequired(PermissionError_):
    message = "Creating a section needs a staff account."


class TokenPowerExceeded(PermissionError_):
    """A token cannot mint a token with more scopes, or a later expiry, than its own."""

    message = "A new token cannot have more scopes or a later expiry than the token that creates it."


class SlugTaken(Conflict):
    reason = "slug_taken"
    message = "That slug is already taken."


class RenameLimit(Conflict):
    reason = "rename_limit"
    message = "This parent has retired as many slugs as it may keep; take an old slug back instead."


class LastOwner(Conflict):
    reason = "last_owner"
    message = "A project or section always keeps at least one active owner: add another owner first."
