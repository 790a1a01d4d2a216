"""The pure algorithms (SPEC §4): ranges, the wake cover (hypothesis, N up to 10⁶), digests, nap helpers."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memories import tree
from memories.tree import Block

N = st.integers(min_value=0, max_value=10**6)


def reference_cover(n: int, budget: int) -> list[tuple[int, int]]:
    """SPEC §4 wake cover written as literally as possible (slow, obviously right)."""
    blocks, start = [], 0
    for bit in reversed(range(n.bit_length())):
        if n >> bit & 1:
            blocks.append((start, 1 << bit))
            start += 1 << bit
    while len(blocks) < budget:
        splittable = [i for i, (_, size) in enumerate(blocks) if size >= 2]
        if not splittable:
            break
        i = splittable[-1]
        begin, size = blocks[i]
        blocks[i : i + 1] = [(begin, size // 2), (begin + size // 2, size // 2)]
    return blocks


@settings(max_examples=300, deadline=None)
@given(n=N)
def test_cover_lines_tile_zero_to_n_in_order_for_every_budget(n):
    for budget in range(32, 129):
        blocks = tree.cover(n, budget)
        position = 0
        for block in blocks:
            assert block.start == position
            position += block.size
        assert position == n


@settings(max_examples=300, deadline=None)
@given(n=N)
def test_cover_lines_are_aligned_power_of_two_blocks(n):
    for budget in (32, 77, 128):
        for block in tree.cover(n, budget):
            assert block.size & (block.size - 1) == 0
            assert block.start % block.size == 0


@settings(max_examples=300, deadline=None)
@given(n=N, budget=st.integers(min_value=32, max_value=128))
def test_cover_has_at_most_budget_lines_or_popcount_when_larger(n, budget):
    blocks = tree.cover(n, budget)
    assert len(blocks) <= max(budget, n.bit_count())
    if len(blocks) < budget:  # the budget is only left unused when every line is a single entry
        assert all(block.size == 1 for block in blocks)
        assert len(blocks) == n


@settings(max_examples=300, deadline=None)
@given(n=N, budget=st.integers(min_value=32, max_value=128))
def test_cover_opens_the_newest_blocks_first(n, budget):
    sizes = [block.size for block in tree.cover(n, budget)]
    # older history is never finer than newer history
    assert sizes == sorted(sizes, reverse=True)


@settings(max_examples=200, deadline=None)
@given(n=N, budget=st.integers(min_value=32, max_value=128))
def test_cover_equals_the_literal_definition(n, budget):
    assert [(b.start, b.size) for b in tree.cover(n, budget)] == reference_cover(n, budget)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(min_value=1, max_value=10**6), budget=st.integers(32, 128), data=st.data())
def test_blocks_without_a_live_summary_are_marked_missing(n, budget, data):
    blocks = tree.cover(n, budget)
    ranged = [(b.start, b.end) for b in blocks if b.size > 1]
    live = set(data.draw(st.lists(st.sampled_from(ranged), unique=True))) if ranged else set()
    for block, kind in tree.classify(blocks, live):
        if block.size == 1:
            assert kind == "entry"
        else:
            assert kind == ("summary" if (block.start, block.end) in live else "missing")


def test_cover_of_an_empty_store_has_no_lines():
    assert tree.cover(0, 32) == []


def test_cover_worked_example_from_the_docs():
    labels = [b.label for b in tree.cover(1000, 32)]
    coarse = ["0-511", "512-767", "768-895", "896-959", "960-967", "968-971", "972-973", "974-975"]
    assert labels == coarse + [str(seq) for seq in range(976, 1000)]


def test_maximal_blocks_follow_the_set_bits_largest_first():
    assert [b.label for b in tree.maximal_blocks(13)] == ["0-7", "8-11", "12"]


@pytest.mark.parametrize(("text", "block"), [("5", Block(5, 1)), ("0-1", Block(0, 2)), ("8-15", Block(8, 8))])
def test_parse_range_accepts_entries_and_aligned_ranges(text, block):
    assert tree.parse_range(text) == block


@pytest.mark.parametrize(
    "text",
    ["1-2", "0-2", "3-3", "-1", "5-4", "4-7-9", "", " 1", "01", "1 - 2", "0x10", "1.5", "9" * 25, f"0-{2**63 - 1}"],
)
def test_parse_range_rejects_malformed_and_unaligned_ranges(text):
    with pytest.raises(tree.RangeError):
        tree.parse_range(text)


@pytest.mark.parametrize("text", [f"0-{2**63 - 1}", f"0-{2**64 - 1}", "9" * 25, f"{2**62 + 1}", f"0-{10**80}"])
def test_a_number_past_max_seq_is_named_so_however_many_digits_it_has(text):
    """A 20-digit number was "not a range" where a 19-digit one was "above MAX_SEQ" (a breaker): one wording."""
    with pytest.raises(tree.RangeError, match=f"entry numbers above {tree.MAX_SEQ} are not supported"):
        tree.parse_range(text)


def test_parse_range_can_refuse_a_single_entry():
    with pytest.raises(tree.RangeError):
        tree.parse_range("4", allow_entry=False)


def test_needed_count_is_every_aligned_range_of_size_two_or_more():
    for n in range(0, 300):
        brute = sum(1 for k in range(1, 10) for start in range(0, n, 2**k) if start + 2**k <= n)
        assert tree.needed_count(n) == brute


def test_ranges_containing_yields_the_block_and_its_ancestors_inside_n():
    assert [b.label for b in tree.ranges_containing(Block(5, 1), 8)] == ["4-5", "4-7", "0-7"]
    assert [b.label for b in tree.ranges_containing(Block(8, 2), 12)] == ["8-9", "8-11"]


def test_source_digest_matches_the_documented_formula():
    def h(text):
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    expected = h("memories-digest-v1\n" + "0-1" + "\n" + h("left é") + "\n" + "2-3" + "\n" + h("right 😀") + "\n")
    assert tree.source_digest(Block(0, 2), "left é", Block(2, 2), "right 😀") == expected
    assert tree.source_digest(Block(4, 1), "a", Block(5, 1), "b") == h(
        "memories-digest-v1\n4\n" + h("a") + "\n5\n" + h("b") + "\n"
    )
