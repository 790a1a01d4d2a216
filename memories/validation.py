"""Field rules of the log surface shared by REST, MCP and the importer (SPEC §4, §8b)."""

from __future__ import annotations

from memories.models import MODEL_MAX_CHARS
from stores.validation import clean_name


def clean_model(value: object, *, field: str = "model") -> str:
    """Return a summary's self-declared model id: the one name rule (`stores.validation.clean_name`) at 1–200
    characters — no control characters, no U+2028/U+2029. Every reader sees it on wake and zoom lines: compact
    stored "\\n" (a breaker), and an import of an edited export stored "\\n# injected" (another), so compact's
    `model` and an imported summary's `model` are judged by this one function. Raises InvalidRequest naming
    `field`.
    """
    return clean_name(value, field=field, max_chars=MODEL_MAX_CHARS)
