"""What can go wrong in the back office."""

from config.errors import InvalidRequest


class ReasonRequired(InvalidRequest):
    message = "A reason is required to archive a store."
