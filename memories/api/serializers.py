"""Request validation and response shapes of the Memories log endpoints (SPEC §4).

Input serializers are strict (unknown fields/parameters are 400). Output serializers render the dicts
built by `memories.selectors` and name the OpenAPI components.
"""

from __future__ import annotations

import re

from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from backoffice.models import REASON_MAX_CHARS
from config.api import (
    JsonIntegerField,
    PlainObjectRendering,
    QueryBooleanField,
    StrictQuerySerializer,
    StrictSerializer,
    Utf8TextField,
)
from config.api import datetime_formatter as _formatter
from config.errors import InvalidRequest
from config.fields import NAME_PATTERN, OneShapeField, SignedTokenField
from memories import tree
from memories.models import BODY_MAX_BYTES, MODEL_MAX_CHARS, NONCE_MAX_CHARS, SUMMARY_MAX_BYTES
from memories.nap import NAP_MAX_LIMIT
from memories.selectors import RECALL_MAX_PATTERN_CHARS as PATTERN_MAX_CHARS
from memories.validation import clean_model

DIGEST_MESSAGE = "Must be 64 lowercase hexadecimal characters (a SHA-256), as nap handed it out."


RANGE_MAX_CHARS = 64


@extend_schema_field(
    {"type": "string", "minLength": 1, "maxLength": RANGE_MAX_CHARS, "pattern": f"^{tree.RANGE_SYNTAX}$"}
)
class RangeField(serializers.CharField):
    """A range string, ``"n"`` or aligned ``"a-b"``, parsed into a `memories.tree.Block`.

    Documented with the syntax `tree.parse_range` reads (`tree.RANGE_SYNTAX`) as its pattern; what a
    pattern cannot say (sizes and alignment, numbers up to 2^62) is the parser's 400.
    """

    def __init__(self, *, allow_entry: bool = True, **kwargs):
        self.allow_entry = allow_entry
        kwargs.setdefault("trim_whitespace", False)  # " 0-1" and "+1" (a space in a query) are not ranges
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        # Another JSON type never gets here: every serializer with a range is strict (a body's StrictSerializer
        # says "Must be a string, not …" as /mcp does; a query's values are strings).
        if len(data) > RANGE_MAX_CHARS:
            raise serializers.ValidationError(f"Must be at most {RANGE_MAX_CHARS} characters.")
        text = super().to_internal_value(data)
        try:
            return tree.parse_range(text, allow_entry=self.allow_entry, field=self.field_name)
        except tree.RangeError as exc:
            raise serializers.ValidationError(str(exc).split(": ", 1)[-1]) from None

    def to_representation(self, value):
        return value.label if isinstance(value, tree.Block) else str(value)


_SEQ_RE = re.compile(r"0|[1-9][0-9]{0,18}")


def parse_seq(value: object) -> int:
    """A `seq` path parameter: canonical decimal, 0..MAX_SEQ. Raises InvalidRequest (400) naming `seq`."""
    if not isinstance(value, str) or not _SEQ_RE.fullmatch(value) or int(value) > tree.MAX_SEQ:
        raise InvalidRequest(f"seq: must be an entry number, a non-negative integer ≤ {tree.MAX_SEQ} in decimal.")
    return int(value)


class SnapshotQueryField(serializers.IntegerField):
    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", tree.MAX_SEQ)
        kwargs.setdefault("help_text", "Read at this entry count (default: the current entry_count).")
        super().__init__(**kwargs)


# ------------------------------------------------------------------------------------------ requests


@extend_schema_serializer(component_name="Note")
class NoteRequestSerializer(StrictSerializer):
    body_md = Utf8TextField(min_bytes=1, max_bytes=BODY_MAX_BYTES, help_text="1..1,024 UTF-8 bytes, stored as sent.")
    client_nonce = Utf8TextField(
        min_bytes=1,
        max_length=NONCE_MAX_CHARS,
        required=False,
        allow_null=True,
        help_text="Idempotency key scoped to (store, author), ≤128 characters.",
    )


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": MODEL_MAX_CHARS, "pattern": NAME_PATTERN})
class ModelNameField(serializers.CharField):
    """The summarising model's self-declared id: `memories.validation.clean_model` (1–200 characters, the one
    name rule); every reader sees it on wake and zoom lines."""

    def __init__(self, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(min_length=1, max_length=MODEL_MAX_CHARS, **kwargs)

    def to_internal_value(self, data):
        return clean_model(data, field=self.field_name)  # its 400 names the field


class DigestField(OneShapeField, serializers.RegexField):
    """A nap job's `source_digest`: exactly 64 lowercase hexadecimal characters (a SHA-256); every refusal,
    blank, too short, too long or not hex, is the one `DIGEST_MESSAGE` (`config.fields.OneShapeField`)."""

    shape_message = DIGEST_MESSAGE

    def __init__(self, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        kwargs.setdefault("error_messages", {"blank": DIGEST_MESSAGE})
        super().__init__(r"^[0-9a-f]{64}$", max_length=64, min_length=64, **kwargs)


@extend_schema_serializer(component_name="Compact")
class CompactRequestSerializer(StrictSerializer):
    range = RangeField(allow_entry=False, help_text="Aligned range 'a-b' of size 2^k, k ≥ 1.")
    generation = JsonIntegerField(min_value=1, max_value=tree.MAX_GENERATION)
    source_digest = DigestField(
        help_text="From the nap job (64 lowercase hex characters, a SHA-256), sent back as given."
    )
    summary_md = Utf8TextField(min_bytes=1, max_bytes=SUMMARY_MAX_BYTES)
    model = ModelNameField(help_text="Self-declared model id, 1..200 characters, no control characters.")
    snapshot = JsonIntegerField(
        min_value=0, max_value=tree.MAX_SEQ, required=False, help_text="Report complete/pending for this snapshot."
    )


@extend_schema_serializer(component_name="Redact")
class RedactRequestSerializer(StrictSerializer):
    reason = Utf8TextField(
        min_bytes=1,
        max_length=REASON_MAX_CHARS,
        help_text="Why the entry is redacted (1..1,000 characters of visible text; line breaks and tabs allowed, "
        "no other control or invisible formatting characters). Kept in the audit log only: never shown to "
        "readers, never exported.",
    )


@extend_schema_serializer(component_name="Forget")
class ForgetRequestSerializer(StrictSerializer):
    range = RangeField(help_text="An entry 'n' or an aligned range 'a-b'.")
    generation = JsonIntegerField(min_value=1, max_value=tree.MAX_GENERATION)


class WakeQuerySerializer(StrictQuerySerializer):
    budget = serializers.IntegerField(min_value=32, max_value=128, default=32, required=False)
    snapshot = SnapshotQueryField()


class NapQuerySerializer(StrictQuerySerializer):
    snapshot = SnapshotQueryField()
    limit = serializers.IntegerField(
        min_value=1,
        max_value=NAP_MAX_LIMIT,
        default=1,
        required=False,
        help_text="Jobs to return (and claim) at once, 1..16; data.jobs holds them, data.job is the first.",
    )


class ZoomQuerySerializer(StrictQuerySerializer):
    range = RangeField(help_text="An entry 'n' or an aligned range 'a-b'.")
    snapshot = SnapshotQueryField()


class ExportQuerySerializer(StrictQuerySerializer):
    """The export takes no parameters; any is a 400."""


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": PATTERN_MAX_CHARS})
class RecallPatternField(serializers.CharField):
    """The recall pattern; its length (≤200 characters) is checked by `memories.selectors.recall`, whose
    400 names the length found."""


class RecallQuerySerializer(StrictQuerySerializer):
    pattern = RecallPatternField(trim_whitespace=False, help_text="RE2 pattern, ≤200 characters, ≤1,024 instructions.")
    case_sensitive = QueryBooleanField(
        default=False, required=False, help_text="Match case exactly (default: case-insensitive)."
    )
    cursor = SignedTokenField(max_length=4096, help_text="meta.next_cursor of the last page.")
    limit = serializers.IntegerField(min_value=1, max_value=100, default=100, required=False)


# ----------------------------------------------------------------------------------------- responses


# Fields whose value, as `memories.selectors` builds it (int, str, bool, lists of ints), is already what
# the field renders: IntegerField int(), CharField str(), ChoiceField the str choice, BooleanField the
# bool, ListField a list of the same items.
# Only the classes' own to_representation counts: a subclass that overrides it is not rendered plainly.
_AS_IS = {
    cls.to_representation
    for cls in (serializers.IntegerField, serializers.CharField, serializers.ChoiceField, serializers.BooleanField)
}
_AS_IS_LIST_ITEMS = {serializers.IntegerField.to_representation, serializers.CharField.to_representation}


def _plain_list(field: serializers.Field) -> bool:
    if type(field).to_representation is not serializers.ListField.to_representation:
        return False
    child = field.child
    return type(child).to_representation in _AS_IS_LIST_ITEMS or _plain_list(child)


class PlainRendering:
    """Render a selector's dicts exactly as ``serializer_class(item).data`` (`one`) or ``(items,
    many=True).data`` (`many`) would, without DRF's per-field machinery (issue 17: hot read responses).

    The serializer stays the OpenAPI source; this follows its declared fields: keys in field order, a
    missing nullable field None, a missing optional one left out and a missing required one a KeyError
    (as DRF's `Field.get_attribute`, in that order; defaults are refused),
    None kept as None, int/str/bool/choice values and lists of ints or strs as they are (see `_AS_IS`),
    datetimes through the declared DateTimeField with the active time zone looked up once per call,
    nested serializers recursively. Other field kinds, or a `source`, are a TypeError when the rendering
    is built (import time), so a serializer cannot grow a field this would render wrongly.
    tests/log/test_plain_rendering.py and test_recall.py compare both renderings.
    """

    def __init__(self, serializer_class: type[serializers.Serializer]):
        # (name, when missing: "null" (DRF renders None for a nullable field) / True (KeyError) / False
        # (left out), how, its argument)
        self.plan: list[tuple[str, bool | str, str, object]] = []
        for name, field in serializer_class._declared_fields.items():
            if field._kwargs.get("source", name) != name:
                raise TypeError(f"{serializer_class.__name__}.{name}: a source is not rendered plainly")
            if field.default is not serializers.empty:
                raise TypeError(f"{serializer_class.__name__}.{name}: a default is not rendered plainly")
            if isinstance(field, serializers.ListSerializer):
                how, arg = "many", PlainRendering(type(field.child))
            elif isinstance(field, serializers.Serializer):
                how, arg = "one", PlainRendering(type(field))
            elif type(field).to_representation is serializers.DateTimeField.to_representation:
                how, arg = "time", field
            elif type(field).to_representation in _AS_IS or _plain_list(field):
                how, arg = "as_is", None
            else:
                raise TypeError(f"{serializer_class.__name__}.{name}: {type(field).__name__} is not rendered plainly")
            self.plan.append((name, "null" if field.allow_null else field.required, how, arg))

    def one(self, item: dict) -> dict:
        """``serializer_class(item).data`` for one dict."""
        return self._render(item, {})

    def many(self, items: list[dict]) -> list[dict]:
        """``serializer_class(items, many=True).data`` for a list of dicts."""
        formatters: dict[int, object] = {}
        return [self._render(item, formatters) for item in items]

    def _render(self, item: dict, formatters: dict) -> dict:
        out = {}
        for name, missing, how, arg in self.plan:
            if name not in item:
                if missing == "null":
                    out[name] = None
                    continue
                if missing:
                    raise KeyError(name)
                continue
            value = item[name]
            if value is None or how == "as_is":
                pass
            elif how == "time":
                value = _formatter(arg, formatters)(value)
            elif how == "many":
                value = [arg._render(child, formatters) for child in value]
            else:
                value = arg._render(value, formatters)
            out[name] = value
        return out


class EntrySerializer(serializers.Serializer):
    """An entry as `note` and `redact` return it; `body_md` is null once redacted (then `redacted_at`/`redacted_by`)."""

    seq = serializers.IntegerField()
    author = serializers.CharField(source="author.handle")
    created_at = serializers.DateTimeField()
    body_md = serializers.CharField(allow_null=True)
    size_bytes = serializers.IntegerField()
    client_nonce = serializers.CharField(allow_null=True)
    redacted_at = serializers.DateTimeField(allow_null=True)
    redacted_by = serializers.CharField(source="redacted_by.handle", allow_null=True)


render_entry = PlainObjectRendering(EntrySerializer).one


class NoteMetaSerializer(serializers.Serializer):
    replayed = serializers.BooleanField()


class NoteEnvelopeSerializer(serializers.Serializer):
    data = EntrySerializer()
    meta = NoteMetaSerializer()


class LineSerializer(serializers.Serializer):
    """One wake/zoom line; entry lines carry seq/author/created_at, summary lines model and first/last_at.

    A redacted entry is a `redacted` line: seq, author, created_at and redacted_at, text null.
    """

    range = serializers.CharField()
    kind = serializers.ChoiceField(choices=["entry", "redacted", "summary", "missing"])
    text = serializers.CharField(allow_null=True)
    seq = serializers.IntegerField(required=False)
    author = serializers.CharField(required=False)
    created_at = serializers.DateTimeField(required=False)
    redacted_at = serializers.DateTimeField(required=False)
    model = serializers.CharField(required=False)
    generation = serializers.IntegerField(required=False)
    first_at = serializers.DateTimeField(required=False)
    last_at = serializers.DateTimeField(required=False)


class CompactionHintSerializer(serializers.Serializer):
    pending = serializers.IntegerField()
    message = serializers.CharField()


class WakeDataSerializer(serializers.Serializer):
    snapshot = serializers.IntegerField()
    budget = serializers.IntegerField()
    generation = serializers.IntegerField()
    entry_count = serializers.IntegerField()
    complete = serializers.BooleanField()
    lines = LineSerializer(many=True)
    compaction = CompactionHintSerializer(allow_null=True)


render_wake = PlainRendering(WakeDataSerializer).one


class WakeEnvelopeSerializer(serializers.Serializer):
    data = WakeDataSerializer()
    meta = serializers.DictField()


class ZoomDataSerializer(serializers.Serializer):
    snapshot = serializers.IntegerField()
    range = serializers.CharField()
    line = LineSerializer()
    halves = LineSerializer(many=True)


render_zoom = PlainRendering(ZoomDataSerializer).one


class ZoomEnvelopeSerializer(serializers.Serializer):
    data = ZoomDataSerializer()
    meta = serializers.DictField()


class JobChildSerializer(serializers.Serializer):
    """A child of a compaction job; a redacted entry is kind `redacted` with text ""."""

    range = serializers.CharField()
    kind = serializers.ChoiceField(choices=["entry", "redacted", "summary"])
    text = serializers.CharField(allow_blank=True)
    author = serializers.CharField()
    created_at = serializers.DateTimeField()
    model = serializers.CharField(required=False)


class JobSerializer(serializers.Serializer):
    range = serializers.CharField()
    level = serializers.IntegerField()
    generation = serializers.IntegerField()
    source_digest = serializers.CharField()
    snapshot = serializers.IntegerField()
    children = JobChildSerializer(many=True)
    max_bytes = serializers.IntegerField()
    prompt = serializers.CharField()
    claimed_until = serializers.DateTimeField(
        allow_null=True,
        help_text="When your claim on this job lapses (database time); null when you nap without write access.",
    )


class NapDataSerializer(serializers.Serializer):
    complete = serializers.BooleanField()
    snapshot = serializers.IntegerField()
    generation = serializers.IntegerField()
    job = JobSerializer(allow_null=True, help_text="The first of `jobs`, or null.")
    jobs = JobSerializer(many=True, help_text="Up to `limit` jobs, lowest level first, then oldest start.")


class NapMetaSerializer(serializers.Serializer):
    pending = serializers.IntegerField()
    retry_after = serializers.IntegerField(
        required=False,
        help_text="Only when every ready job is claimed by someone else: whole seconds until the earliest "
        "of those claims lapses. Nap again sooner (a claimant usually finishes first), never later.",
    )


class NapEnvelopeSerializer(serializers.Serializer):
    data = NapDataSerializer()
    meta = NapMetaSerializer()


class SummarySerializer(serializers.Serializer):
    """A stored summary as `compact` returns it."""

    range = serializers.SerializerMethodField()
    level = serializers.IntegerField()
    summary_md = serializers.CharField()
    model = serializers.CharField()
    author = serializers.CharField(source="author.handle")
    source_digest = serializers.CharField()
    generation = serializers.IntegerField()
    created_at = serializers.DateTimeField()

    def get_range(self, summary) -> str:
        return tree.Block(summary.start, summary.end - summary.start + 1).label


class CompactMetaSerializer(serializers.Serializer):
    snapshot = serializers.IntegerField()
    complete = serializers.BooleanField()
    pending = serializers.IntegerField()
    created = serializers.BooleanField()


class CompactEnvelopeSerializer(serializers.Serializer):
    data = SummarySerializer()
    meta = CompactMetaSerializer()


class RedactMetaSerializer(serializers.Serializer):
    """`meta` of a redaction, rendered from `memories.services.Redacted` (REST and MCP alike)."""

    changed = serializers.BooleanField(help_text="False when the entry was already redacted (nothing done).")
    invalidated = serializers.ListField(
        child=serializers.CharField(), help_text="Live summaries invalidated by this call, smallest first."
    )
    summaries_redacted = serializers.IntegerField(help_text="Summary rows whose text this call nulled.")
    generation = serializers.IntegerField(help_text="The store's generation after the call.")


class RedactEnvelopeSerializer(serializers.Serializer):
    data = EntrySerializer()
    meta = RedactMetaSerializer()


class ForgetDataSerializer(serializers.Serializer):
    invalidated = serializers.ListField(child=serializers.CharField())
    generation = serializers.IntegerField()


class ForgetEnvelopeSerializer(serializers.Serializer):
    data = ForgetDataSerializer()
    meta = serializers.DictField()


class RecallMatchSerializer(serializers.Serializer):
    """One recall match (SPEC §4). The schema's source; responses are rendered by `render_recall_matches`
    (0.83 → 0.10 ms for 51 matches)."""

    seq = serializers.IntegerField()
    author = serializers.CharField()
    created_at = serializers.DateTimeField()
    body_md = serializers.CharField()
    spans = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2),
        help_text="[start, end) offsets of each match, in code points.",
    )


render_recall_matches = PlainRendering(RecallMatchSerializer).many


class RecallMetaSerializer(serializers.Serializer):
    next_cursor = serializers.CharField(
        allow_null=True, help_text="Send it with the same pattern for the next page; null when entry 0 was examined."
    )
    snapshot = serializers.IntegerField(help_text="The entry count the first page fixed.")
    examined = serializers.IntegerField(
        help_text=(
            "Entries this page examined: at most 256; fewer when `limit` or the page's CPU budget "
            "(RECALL_PAGE_BUDGET) stopped it — a page may be empty while more remain."
        )
    )


class RecallEnvelopeSerializer(serializers.Serializer):
    data = RecallMatchSerializer(many=True)
    meta = RecallMetaSerializer()
