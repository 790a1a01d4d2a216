"""Parsing Debian changelogs into entries and notes (demo.changelogs): exact text, splitting, nonces."""

from __future__ import annotations

import gzip
from pathlib import Path

from demo.changelogs import (
    decode,
    discover,
    file_prefix,
    note_nonce,
    parse_changelog,
    read_changelog,
    unique_changelogs,
)
from tests.demo.conftest import CHANGELOGS, entry, long_body, write_changelog


def test_each_entry_runs_from_its_header_through_its_trailer_exactly():
    text = "\n\n".join(CHANGELOGS["alpha-tools"]) + "\n"
    changelog = parse_changelog(text, package="alpha-tools")
    assert [e.text for e in changelog.entries] == CHANGELOGS["alpha-tools"]
    assert all(text[e.start : e.end] == e.text for e in changelog.entries)


def test_entries_are_numbered_from_the_oldest_and_keep_their_version():
    changelog = parse_changelog("\n\n".join(CHANGELOGS["alpha-tools"]), package="alpha-tools")
    assert [(e.ordinal, e.version) for e in changelog.chronological()] == [(0, "2.0-1"), (1, "2.0-2"), (2, "2.1-1")]


def test_an_entry_over_1024_bytes_becomes_several_notes_that_join_to_its_text():
    changelog = parse_changelog(entry("alpha-tools", "2.0-2", long_body()), package="alpha-tools")
    (only,) = changelog.entries
    notes = only.notes()
    assert len(notes) > 1
    assert "".join(notes) == only.text
    assert all(1 <= len(note.encode("utf-8")) <= 1024 for note in notes)


def test_a_small_entry_is_one_note():
    (only,) = parse_changelog(entry("beta-lib", "1.0-1", "  * Hi."), package="beta-lib").entries
    assert only.notes() == [only.text]


def test_lines_outside_entries_are_ignored():
    text = "Old Changelog:\n\n" + entry("p", "1-1", "  * x") + "\n\nLocal variables:\nmode: debian-changelog\nEnd:\n"
    changelog = parse_changelog(text, package="p")
    assert [e.text for e in changelog.entries] == [entry("p", "1-1", "  * x")]
    assert changelog.malformed == 0


def test_a_header_without_a_trailer_is_counted_as_malformed_and_dropped():
    text = "p (2-1) unstable; urgency=low\n\n  * lost\n\n" + entry("p", "1-1", "  * kept")
    changelog = parse_changelog(text, package="p")
    assert [e.version for e in changelog.entries] == ["1-1"]
    assert changelog.malformed == 1


def test_crlf_line_endings_are_kept_in_the_entry_text():
    text = entry("p", "1-1", "  * x").replace("\n", "\r\n") + "\r\n"
    (only,) = parse_changelog(text, package="p").entries
    assert only.text == text[:-2]
    assert "\r\n" in only.text


def test_an_entry_holding_nul_is_skipped_and_counted():
    text = entry("p", "2-1", "  * bad \x00 byte") + "\n\n" + entry("p", "1-1", "  * fine")
    changelog = parse_changelog(text, package="p")
    assert [e.version for e in changelog.entries] == ["1-1"]
    assert changelog.skipped_nul == 1


def test_a_file_that_is_not_utf8_is_decoded_as_latin1(tmp_path):
    path = write_changelog(tmp_path, "old-pkg", entry("old-pkg", "0.1-1", "  * Grüße."), encoding="latin-1")
    changelog = read_changelog(path)
    assert changelog.encoding == "latin-1"
    assert "Grüße" in changelog.entries[0].text and "Müller" in changelog.entries[0].text


def test_decode_prefers_utf8():
    assert decode("é".encode()) == ("é", "utf-8")


def test_discover_lists_one_changelog_per_package_in_name_order(changelog_dir: Path):
    (changelog_dir / "zeta").symlink_to(changelog_dir / "beta-lib")  # Debian links some doc folders
    (changelog_dir / "empty").mkdir()
    assert [p.parent.name for p in discover(changelog_dir)] == ["alpha-tools", "beta-lib", "gamma-daemon"]


def test_nonces_are_stable_distinct_and_at_most_128_characters():
    (short,) = parse_changelog(entry("p", "1-1", "  * x"), package="p").entries
    assert note_nonce(short, 0) == f"deb:p:1-1:{short.digest}:0"
    assert note_nonce(short, 1) != note_nonce(short, 0)
    (long,) = parse_changelog(entry("p", "1-" + "9" * 200, "  * x"), package="p").entries
    assert len(note_nonce(long, 0)) <= 128
    assert note_nonce(long, 0) == note_nonce(long, 0) != note_nonce(long, 1)


def test_file_prefix_keeps_whole_entries_that_fit(tmp_path):
    entries = [entry("p", f"{n}-1", "  * " + "x" * 300) for n in range(5, 0, -1)]
    text = "\n\n".join(entries) + "\n"
    changelog = read_changelog(write_changelog(tmp_path, "p", text))
    assert file_prefix(changelog, max_bytes=len(text.encode())) == text
    cut = file_prefix(changelog, max_bytes=1000)
    assert cut == "\n\n".join(entries[:2])
    assert gzip.decompress(changelog.path.read_bytes()).decode().startswith(cut)


def test_copies_of_a_changelog_that_differ_outside_the_entries_count_once():
    body = entry("systemd", "252-1", "  * x")
    copies = [
        parse_changelog(body + "\n\n# To read the complete changelog use `apt changelog udev`.\n", package="udev"),
        parse_changelog(
            body + "\n\n# To read the complete changelog use `apt changelog libsystemd0`.\n", package="libsystemd0"
        ),
        parse_changelog("no entries here\n", package="empty"),
        parse_changelog(entry("other", "1-1", "  * y"), package="other"),
    ]
    kept, dropped = unique_changelogs(copies)
    assert [c.package for c in kept] == ["udev", "other"]
    assert dropped == 2


def test_a_nonce_depends_on_the_entry_not_its_position():
    old, new = entry("p", "1-1", "  * x"), entry("p", "2-1", "  * y")
    (alone,) = parse_changelog(old, package="p").entries
    upgraded = parse_changelog(new + "\n\n" + old, package="p").chronological()
    assert note_nonce(upgraded[0], 0) == note_nonce(alone, 0)
    assert note_nonce(upgraded[1], 0) != note_nonce(alone, 0)


def test_a_repeated_identical_entry_gets_its_own_nonce():
    same = entry("p", "1-1", "  * x")
    older, newer = parse_changelog(same + "\n\n" + same, package="p").chronological()
    assert (older.repeat, newer.repeat) == (0, 1)
    assert note_nonce(older, 0) != note_nonce(newer, 0)
