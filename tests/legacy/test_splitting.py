"""The pure splitter behind the 0041 import (SPEC §7): bytes, code points, grapheme clusters, preferences."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from legacy.splitting import split_document
from tests.legacy.helpers import assert_valid_split

TRICKY = [
    "a",
    " ",
    "\n",
    "\r\n",
    "\r",
    "é",
    "e\u0301",
    "\u0301",
    "\u200d",
    "漢",
    "ك",
    "ت\u064e",
    "👩🏽\u200d💻",
    "🇫🇷",
    "🇩",
    "🏳️\u200d🌈",
    "1\ufe0f\u20e3",
    "क्ष",
    "\u1100\u1161\u11a8",
    "\u0600",  # a Prepend character
]


def test_empty_text_has_no_parts():
    assert split_document("") == []


def test_text_of_exactly_the_limit_is_one_part():
    text = "é" * 512
    assert split_document(text) == [text]


def test_one_byte_over_the_limit_gives_two_parts():
    parts = split_document("x" * 1025)
    assert [len(part) for part in parts] == [1024, 1]


def test_a_newline_near_the_end_of_a_chunk_is_preferred_over_a_longer_chunk():
    text = "a" * 900 + "\n" + "b c " * 200
    parts = split_document(text)
    assert parts[0] == "a" * 900 + "\n"


def test_a_space_near_the_end_is_preferred_when_there_is_no_newline():
    text = "a" * 950 + " " + "b" * 500
    assert split_document(text)[0] == "a" * 950 + " "


def test_a_newline_far_from_the_end_is_not_preferred():
    text = "a" * 100 + "\n" + "b" * 2000
    assert len(split_document(text)[0]) == 1024


def test_the_newline_wins_over_a_later_space():
    text = "a" * 850 + "\n" + "b" * 100 + " " + "c" * 500
    assert split_document(text)[0].endswith("\n")


def test_a_space_followed_by_a_combining_mark_is_not_a_cut_point():
    # " \u0301" is one grapheme cluster: cutting after the space would separate the mark from it.
    text = "a" * 1000 + " \u0301" + "b" * 500
    parts = split_document(text)
    assert not parts[0].endswith(" ")
    assert_valid_split(text, parts)


def test_crlf_is_never_cut_in_ascii_text():
    text = "a" * 1023 + "\r\n" + "b" * 10
    parts = split_document(text, near_end=0)
    assert parts[0] == "a" * 1023
    assert parts[1].startswith("\r\n")


def test_flags_and_zwj_sequences_are_never_cut():
    text = "🇫🇷" * 200 + "👩🏽\u200d💻" * 100
    parts = split_document(text)
    assert len(parts) > 1
    assert_valid_split(text, parts)


def test_multibyte_code_points_are_never_cut():
    text = "漢" * 1000  # 3 bytes each; 1,024 is not a multiple of 3
    parts = split_document(text)
    assert [len(part.encode("utf-8")) for part in parts] == [1023, 1023, 954]


def test_a_cluster_larger_than_the_limit_is_cut_only_between_its_code_points():
    giant = "a" + "\u0301" * 1500  # 3,001 bytes in one cluster
    text = "intro " + giant + " outro"
    parts = split_document(text)
    assert parts[0] == "intro "  # the cluster does not start mid-part when it cannot fit
    assert len(parts) == 4
    assert_valid_split(text, parts)


def test_text_after_an_oversized_cluster_is_cut_at_cluster_boundaries_again():
    text = "a" + "\u0301" * 700 + "🇫🇷" * 300
    parts = split_document(text)
    assert_valid_split(text, parts)
    assert parts[-1].startswith("🇫🇷") or parts[-2].endswith("🇫🇷")


def test_a_limit_below_one_code_point_is_rejected():
    with pytest.raises(ValueError):
        split_document("abc", limit=3)


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(TRICKY), max_size=700),
    limit=st.sampled_from([4, 5, 7, 16, 64, 1024]),
    near_end=st.sampled_from([0, 1, 3, 256, 2000]),
)
def test_any_text_splits_losslessly_within_the_limit_at_allowed_cuts(pieces, limit, near_end):
    text = "".join(pieces)
    assert_valid_split(text, split_document(text, limit=limit, near_end=near_end), limit)


@settings(max_examples=200, deadline=None)
@given(text=st.text(st.characters(exclude_categories=["Cs"]), max_size=3000))
def test_arbitrary_unicode_splits_losslessly_within_the_limit_at_allowed_cuts(text):
    assert_valid_split(text, split_document(text, limit=64), 64)
