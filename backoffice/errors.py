"""What can go wrong in the back office."""

from config.errors import InvalidRequest


class ReasonRequired(InvalidRequest):
    message = "reason: a reason is required (1–1,000 characters)."
