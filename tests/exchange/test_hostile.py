"""Hostile import files are refused with a clear error naming the line, and nothing changes (SPEC §8b).

Each test edits a real export (`sample`) and, unless it is testing the chain itself, re-assembles it with a
correct end line, so the check under test is the one that fires — not the chain, which would refuse any
edited file anyway.
"""

from __future__ import annotations

import copy
import io
import json

import pytest

from accounts.models import User
from memories.exchange.errors import ImportInvalid, StoreNotEmpty, UnknownHandles
from memories.exchange.format import Chain, dump_line
from memories.exchange.services import import_file
from memories.models import Entry, Summary
from stores.models import Store
from tests.exchange.conftest import STAMP, assemble, census, export_bytes, import_bytes, without_export_time
from tests.factories import ProjectFactory, StoreFactory, project_store

pytestmark = pytest.mark.django_db


def refuse(data: bytes, error=ImportInvalid, **kwargs) -> Exception:
    before = census()
    with pytest.raises(error) as caught:
        import_bytes(data, **kwargs)
    assert census() == before, "a refused import changed something"
    return caught.value


def line_of(objects: list[dict], predicate) -> int:
    """1-based line number of the first object matching `predicate`."""
    return next(i for i, obj in enumerate(objects, 1) if predicate(obj))


def entry(objects, seq):
    return next(obj for obj in objects if obj["type"] == "entry" and obj["seq"] == seq)


def test_the_untouched_sample_imports(sample):
    assert import_bytes(assemble(sample)).store.entry_count == 40


def test_bad_json_is_refused_with_its_line(sample):
    lines = assemble(sample).split(b"\n")
    lines[3] = b'{"type": "entry", "seq": 2,'
    error = refuse(b"\n".join(lines))
    assert error.details["line"] == 4 and "not valid JSON" in error.message


def test_a_file_that_is_not_json_lines_at_all_is_refused():
    assert refuse(b"hello world\n").details["line"] == 1
    assert "empty" in refuse(b"").message


def test_an_unknown_format_version_is_refused(sample):
    sample[0]["version"] = 2
    error = refuse(assemble(sample))
    assert error.message == "line 1: format version 2 is not supported; this server reads version 1."


def test_a_file_of_another_kind_is_refused(sample):
    sample[0]["type"] = "something-else"
    assert "is not a Memories export header" in refuse(assemble(sample)).message


def test_a_seq_gap_is_refused(sample):
    gap = line_of(sample, lambda obj: obj["type"] == "entry" and obj["seq"] == 10)
    del sample[gap - 1]
    error = refuse(assemble(sample))
    assert error.details["line"] == gap
    assert "seq is 11; entry 10 comes next" in error.message


def test_an_oversize_body_is_refused(sample):
    body = "é" * 513  # 1,026 bytes
    entry(sample, 3).update(body_md=body, size_bytes=len(body.encode()))
    error = refuse(assemble(sample))
    assert "is 1026 UTF-8 bytes; it must be 1 to 1024" in error.message


def test_a_nul_character_is_refused(sample):
    entry(sample, 3).update(body_md="a\u0000b", size_bytes=3)
    error = refuse(assemble(sample))
    assert "NUL" in error.message and error.details["line"] == line_of(sample, lambda o: o.get("seq") == 3)


def test_a_lone_surrogate_is_refused(sample):
    lines = assemble(sample).split(b"\n")
    number = line_of(sample, lambda o: o.get("seq") == 3)
    lines[number - 1] = lines[number - 1].replace(b"entry 3 by bob", b"entry \\ud800 by bob")
    assert "lone surrogate" in refuse(b"\n".join(lines)).message


def test_bytes_that_are_not_utf8_are_refused(sample):
    lines = assemble(sample).split(b"\n")
    lines[2] = lines[2].replace(b"entry 1", b"entry \xff")
    error = refuse(b"\n".join(lines))
    assert error.details["line"] == 3 and "not valid UTF-8" in error.message


def test_an_edited_entry_under_a_live_summary_breaks_its_digest(sample):
    entry(sample, 0).update(body_md="entry 0 by owner: quote «X»")  # same size, different text
    summary = line_of(sample, lambda o: o["type"] == "summary" and o["range"] == "0-1" and not o["invalidated_at"])
    error = refuse(assemble(sample))
    assert error.details["line"] == summary
    assert "source_digest of 0-1 does not match its children" in error.message


def test_an_edited_summary_breaks_its_parents_digest(sample):
    target = next(o for o in sample if o["type"] == "summary" and o["range"] == "0-1" and not o["invalidated_at"])
    target["summary_md"] = target["summary_md"].replace("[0-1", "[0+1")
    parent = line_of(sample, lambda o: o["type"] == "summary" and o["range"] == "0-3" and not o["invalidated_at"])
    error = refuse(assemble(sample))
    assert error.details["line"] == parent and "source_digest of 0-3" in error.message


@pytest.mark.parametrize(
    ("model", "problem"),
    [
        ("evil\n# injected", "control characters or line separators"),  # a breaker: 201, shown on every wake line
        ("evil\u2028- access: write", "control characters or line separators"),
        ("", "must be 1–200 characters"),
        ("m" * 201, "must be 1–200 characters"),
        (7, "Must be a string, not an integer."),
    ],
)
def test_a_summary_model_follows_the_name_rule_compact_applies(sample, model, problem):
    target = next(o for o in sample if o["type"] == "summary" and o["range"] == "0-1" and not o["invalidated_at"])
    target["model"] = model  # not covered by any digest: only the field rule can refuse it
    error = refuse(assemble(sample))
    assert error.details["line"] == line_of(sample, lambda o: o is target)
    assert problem in error.message and "model" in error.message


def test_a_redacted_summary_from_an_older_file_loses_its_digest_on_import(sample):
    """Files exported before redacted summaries dropped their digest still import; the digest is not kept."""
    target = next(o for o in sample if o["type"] == "summary" and o["redacted_at"])
    assert target["source_digest"] is None  # what this server exports
    target["source_digest"] = "ab" * 32
    store = import_bytes(assemble(sample)).store
    assert not Summary.objects.filter(store=store, redacted_at__isnull=False).exclude(source_digest=None).exists()
    target["source_digest"] = "not a digest"
    assert "source_digest" in refuse(assemble(sample)).message


def test_a_live_summary_without_a_digest_is_refused(sample):
    target = next(o for o in sample if o["type"] == "summary" and o["redacted_at"] is None)
    target["source_digest"] = None
    assert "source_digest" in refuse(assemble(sample)).message


def test_a_changed_digest_is_refused(sample):
    target = next(o for o in sample if o["type"] == "summary" and o["range"] == "2-3" and not o["invalidated_at"])
    target["source_digest"] = "0" * 64
    assert "source_digest of 2-3 does not match" in refuse(assemble(sample)).message


def test_a_truncated_file_is_refused(sample):
    data = assemble(sample)
    without_end = data.rstrip(b"\n").rpartition(b"\n")[0] + b"\n"
    error = refuse(without_end)
    assert error.details["line"] == len(sample) + 1
    assert f"ends after line {len(sample)} without its end line" in error.message
    cut = data[: len(data) // 2]
    assert refuse(cut).details["line"] <= len(sample)


def test_an_edit_the_chain_does_not_cover_is_refused(sample):
    data = assemble(sample)
    edited = data.replace(b'"name":"Everything store"', b'"name":"Everything stor3"')
    error = refuse(edited)
    assert error.details["line"] == len(sample) + 1 and "does not match the lines before it" in error.message


def test_lines_after_the_end_are_refused(sample):
    data = assemble(sample) + b'{"type":"entry"}\n'
    assert "comes after the end line" in refuse(data).message


def test_unknown_handles_are_all_reported_and_none_invented(sample):
    sample[0]["handles"] = sorted([*sample[0]["handles"], "zed", "yolanda"])
    entry(sample, 1)["author"] = "zed"
    error = refuse(assemble(sample), UnknownHandles)
    assert error.details["unknown_handles"] == ["yolanda", "zed"]
    assert not User.objects.filter(handle__in=["zed", "yolanda"]).exists()


def test_creating_missing_users_is_explicit_and_reported(sample):
    sample[0]["handles"] = sorted([*sample[0]["handles"], "zed"])
    entry(sample, 1)["author"] = "zed"
    result = import_bytes(assemble(sample), create_missing_users=True)
    assert result.created_users == ["zed"]
    assert User.objects.get(handle="zed").is_active is False


def test_a_handle_missing_from_the_header_is_refused(sample):
    entry(sample, 1)["author"] = "mallory"
    assert '"mallory" is not one of the handles listed in the header' in refuse(assemble(sample)).message


def test_unknown_fields_are_refused(sample):
    entry(sample, 1)["colour"] = "blue"
    assert "entry: unknown colour" in refuse(assemble(sample)).message


def test_sections_out_of_order_are_refused(sample):
    first_summary = line_of(sample, lambda o: o["type"] == "summary")
    sample.insert(first_summary, copy.deepcopy(entry(sample, 39)))
    assert "sections come in order" in refuse(assemble(sample)).message


def test_counts_that_disagree_with_the_lines_are_refused(sample):
    sample[0]["counts"]["entries"] = 41
    assert "the file holds 40 entries; its header counts 41" in refuse(assemble(sample)).message


def test_a_nonce_used_twice_by_one_author_is_refused(sample):
    entry(sample, 9)["client_nonce"] = "n-3"  # seq 3 is bob's too
    entry(sample, 9)["author"] = "bob"
    entry(sample, 3)["author"] = "bob"
    error = refuse(assemble(sample))
    assert 'client_nonce "n-3"' in error.message


def test_two_live_summaries_of_one_range_are_refused(sample):
    live = next(o for o in sample if o["type"] == "summary" and o["range"] == "0-1")
    sample.insert(sample.index(live) + 1, copy.deepcopy(live))
    sample[0]["counts"]["summaries"] += 1
    assert "a second live summary of 0-1" in refuse(assemble(sample)).message


def test_a_version_whose_digest_does_not_match_its_content_is_refused(sample):
    version = next(o for o in sample if o["type"] == "version" and o["content"])
    version["content"] = version["content"].upper()
    assert "content_sha256 does not match" in refuse(assemble(sample)).message


def test_a_history_without_its_created_version_is_refused(sample):
    versions = [o for o in sample if o["type"] == "version"]
    first = next(
        o
        for o in versions
        if o["operation"] == "created" and sum(v["memory_id"] == o["memory_id"] for v in versions) > 1
    )
    sample.remove(first)
    sample[0]["counts"]["versions"] -= 1
    assert 'starts a history without "created"' in refuse(assemble(sample)).message


def test_a_memory_whose_head_is_not_its_newest_version_is_refused(sample):
    versions = [o for o in sample if o["type"] == "version"]
    memory, older_live = next(
        (memory, version)
        for memory in sample
        if memory["type"] == "memory"
        for version in versions
        if version["memory_id"] == memory["id"] and version["id"] != memory["current_version_id"] and version["content"]
    )
    memory.update(
        current_version_id=older_live["id"], path=older_live["path"], content_sha256=older_live["content_sha256"]
    )
    assert "is not the newest version of this memory" in refuse(assemble(sample)).message


def test_a_path_under_another_memory_is_refused(sample):
    memories = [o for o in sample if o["type"] == "memory"]
    victim = memories[1]
    versions = [o for o in sample if o["type"] == "version" and o["memory_id"] == victim["id"]]
    # Move the whole second file under the first one's path (its history and head alike).
    for version in versions:
        if version["path"]:
            version["path"] = memories[0]["path"] + "/inner.md"
    victim["path"] = memories[0]["path"] + "/inner.md"
    sample.remove(victim)
    sample.insert(sample.index(memories[0]) + 1, victim)
    assert "lies under the memory" in refuse(assemble(sample)).message


def test_an_oversize_line_is_refused_unread(sample):
    data = assemble(sample[:1], end=False) + b'{"type":"entry","body_md":"' + b"x" * (1024 * 1024 + 1) + b'"}\n'
    error = refuse(data)
    assert error.details["line"] == 2 and "is over 1048576 bytes; no valid line is longer" in error.message


class EndlessLine(io.RawIOBase):
    """A file: `head`, then a line of "x" that does not end (for 256 MiB); counts the bytes read."""

    def __init__(self, head: bytes) -> None:
        self.head, self.served = head, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.served >= 256 * 1024 * 1024:
            return 0
        part = self.head[self.served : self.served + len(buffer)] if self.served < len(self.head) else b""
        chunk = part or b"x" * len(buffer)
        buffer[: len(chunk)] = chunk
        self.served += len(chunk)
        return len(chunk)


def test_a_line_too_long_is_refused_after_reading_little_more_than_the_limit(sample):
    """Found by a breaker: a 400 MB line took 914 MB of memory before manage.py import_store refused it."""
    raw = EndlessLine(assemble(sample[:1], end=False))
    before = census()
    with pytest.raises(ImportInvalid) as caught:
        import_file(io.BufferedReader(raw))
    assert census() == before
    assert caught.value.details["line"] == 2 and "is over 1048576 bytes" in caught.value.message
    assert raw.served < 4 * 1024 * 1024


def test_readers_cannot_be_imported_into_a_project_store(sample, owner):
    target = project_store(ProjectFactory())
    reader_line = line_of(sample, lambda o: o["type"] == "reader")
    error = refuse(assemble(sample), into=target)
    assert error.details["line"] == reader_line and "belong to user stores" in error.message


def test_a_store_that_is_not_empty_cannot_be_imported_into(sample, owner):
    target = StoreFactory(owner=owner, canonical=False)
    Entry.objects.create(store=target, seq=0, author=owner, body_md="x", size_bytes=1)
    Store.objects.filter(pk=target.pk).update(entry_count=1)
    refuse(assemble(sample), StoreNotEmpty, into=target)


def test_a_canonical_store_is_not_created_twice(sample, owner):
    existing = StoreFactory(owner=owner, canonical=True)
    sample[0]["store"]["canonical"] = True
    result = import_bytes(assemble(sample))
    assert result.store.canonical is False and result.store.pk != existing.pk
    assert result.warnings == [
        f"The subject already has a canonical store ({existing.pk}); this import is an ordinary "
        "(non-canonical) store of the same subject."
    ]
    assert Store.objects.get(pk=existing.pk).canonical is True


def test_a_canonical_export_becomes_canonical_where_the_subject_has_none(sample, owner):
    sample[0]["store"]["canonical"] = True
    result = import_bytes(assemble(sample))
    assert result.store.canonical is True and result.warnings == []


def test_a_canonical_export_fills_an_empty_canonical_store_with_into(sample, owner):
    existing = StoreFactory(owner=owner, canonical=True)
    sample[0]["store"]["canonical"] = True
    store = import_bytes(assemble(sample), into=existing).store
    assert store.pk == existing.pk and store.canonical and store.entry_count == 40
    assert json.loads(json.dumps(store.metadata)) == {"team": "infra", "tier": "gold"}


def reassemble(lines: list[bytes]) -> bytes:
    """`lines` (header and content, without newlines or an end line) as an export with a correct end line."""
    chain = Chain()
    for line in lines:
        chain.update(line)
    end = dump_line({"type": "end", "lines": len(lines), "sha256": chain.state, "exported_at": STAMP})
    return b"".join(line + b"\n" for line in lines) + end


def with_provenance(sample, seq: int, raw: bytes) -> tuple[bytes, int]:
    """The sample with entry `seq`'s provenance spelled as the raw JSON `raw`, and that entry's line."""
    entry(sample, seq)["provenance"] = "PLACEHOLDER"
    lines = assemble(sample, end=False).split(b"\n")[:-1]
    number = line_of(sample, lambda obj: obj["type"] == "entry" and obj["seq"] == seq)
    lines[number - 1] = lines[number - 1].replace(b'"PLACEHOLDER"', raw)
    return reassemble(lines), number


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b'{"x":1e999}', "finite"),  # infinity in Python; PostgreSQL's jsonb refused it: a 500 before
        (b'{"x":-1e999}', "finite"),
        (b'{"x":' + b"[" * 200 + b"]" * 200 + b"}", "nested more than 8"),  # deeper broke every later export
        (b'{"a":{"b":{"c":{"d":{"e":{"f":{"g":{"h":{"i":1}}}}}}}}}', "nested more than 8"),
        (b'"a string"', "must be a JSON object or null"),
        (b"[1, 2]", "must be a JSON object or null"),
        (b'{"x":"' + b"y" * 17_000 + b'"}', "the limit is 16384"),
        # jsonb keeps numbers exactly and writes them out in full: 1e308 came back as 309 digits, an export
        # no import takes; two hundred 1e99 (1 KB here) exported as 20 KB, past the limit (found by a breaker)
        (b'{"x":1e308}', "more than 100 digits as stored"),
        (b'{"x":-1.5E+100}', "more than 100 digits as stored"),
        (b'{"x":[' + b",".join([b"1e99"] * 200) + b"]}", "the limit is 16384"),
    ],
    ids=["infinity", "minus-infinity", "deep", "nine-levels", "string", "array", "large", "1e308", "1.5e100", "wide"],
)
def test_a_provenance_the_server_could_not_store_or_export_is_refused(sample, raw, problem):
    data, number = with_provenance(sample, 5, raw)
    error = refuse(data)
    assert error.details["line"] == number and "entry.provenance" in error.message and problem in error.message


def test_a_provenance_with_extreme_numbers_exports_to_a_file_that_imports_again(sample):
    """Every number an import accepts survives the trip through jsonb as something the next import takes:
    1e99 becomes its 100 digits, small and fractional values stay floats; the second export equals the first."""
    entry(sample, 3)["provenance"] = {"big": 1e99, "small": 1.5e-7, "tiny": 1e-300, "two": 2.0, "minus": -0.0}
    first = import_bytes(assemble(sample)).store
    exported = export_bytes(first)
    stored = Entry.objects.get(store=first, seq=3).provenance
    assert stored["big"] == 10**99 and stored["small"] == 1.5e-7 and stored["tiny"] == 1e-300
    first.delete()
    second = import_bytes(exported).store
    assert without_export_time(export_bytes(second)) == without_export_time(exported)


def test_provenance_as_the_0041_import_writes_it_and_up_to_8_levels_deep_imports(sample):
    legacy = {"source": "record", "source_id": 7, "project": None, "key": "k", "status": "open", "parts": 2}
    entry(sample, 3)["provenance"] = {**legacy, "part": 1, "label_length": 12}
    entry(sample, 4)["provenance"] = {"a": {"b": {"c": {"d": {"e": {"f": {"g": [1.5, True, None]}}}}}}}
    imported = import_bytes(assemble(sample)).store
    stored = dict(Entry.objects.filter(store=imported, seq__in=[3, 4]).values_list("seq", "provenance"))
    assert stored[3]["label_length"] == 12 and stored[4]["a"]["b"]["c"]["d"]["e"]["f"]["g"] == [1.5, True, None]


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda line: line.replace(b'{"type":"entry",', b'{"type":"entry","body_md":"zzz",', 1), "more than once"),
        (lambda line: line.replace(b'"seq":5', b'"seq":' + b"5" * 5000, 1), "more than 100 digits"),
    ],
    ids=["duplicate-key", "huge-integer"],
)
def test_json_this_server_never_writes_is_refused(sample, edit, problem):
    """A key twice in one object was read last-one-wins (two parsers could read one chain-valid file two
    ways); a 5,000-digit number answered with a hint about sys.set_int_max_str_digits (found by a breaker)."""
    lines = assemble(sample, end=False).split(b"\n")[:-1]
    number = line_of(sample, lambda obj: obj["type"] == "entry" and obj["seq"] == 5)
    lines[number - 1] = edit(lines[number - 1])
    error = refuse(reassemble(lines))
    assert error.details["line"] == number and problem in error.message


def test_a_file_that_starts_with_a_byte_order_mark_says_so(sample):
    error = refuse(b"\xef\xbb\xbf" + assemble(sample))
    assert error.details["line"] == 1 and "byte order mark" in error.message
