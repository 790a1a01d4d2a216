"""Pure algorithms of the Memories log (SPEC §4): ranges, the wake cover, nap order, source digests.

No Django, no database: everything here is a function of integers and strings, so it is tested with
hypothesis over stores far larger than any test could insert (``tests/log/test_tree.py``).

A *block* is a half-open pair ``(start, size)`` with ``size`` a power of two and ``start % size == 0``;
on the wire it is written inclusively, ``"start-end"`` (``end = start + size - 1``), or ``"n"`` for a
single entry.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from config.fields import JSON_TYPE_NAMES, json_type_of
from config.text import quoted

DIGEST_PREFIX = "memories-digest-v1\n"
# What a redacted entry contributes to digests and nap jobs (SPEC §4 redact an entry): a child of kind
# `redacted` whose text is the empty string.
REDACTED_TEXT = ""
# Entry numbers beyond this are rejected as input (far beyond any store; keeps BIGINT arithmetic safe).
MAX_SEQ = 2**62
# A store's `generation` is a bigint and grows by one per compaction, redaction or forget: requests accept
# any value a store can hold (a nap job's generation is always accepted back). An import may set it up to
# MAX_SEQ only, which leaves 2^62 increments before the column's range (a store imported at 2^62 then
# redacted could not be compacted or forgotten again while requests stopped at MAX_SEQ; found by a breaker).
MAX_GENERATION = 2**63 - 1
# The syntax of a range: "n" or "a-b", canonical decimal (no sign, no leading zero but "0" itself), at most 19
# digits each; `/openapi.yaml` documents it as the `range` pattern. Size and alignment are `parse_range`'s.
RANGE_SYNTAX = r"(0|[1-9][0-9]{0,18})(?:-(0|[1-9][0-9]{0,18}))?"
_RANGE_RE = re.compile(RANGE_SYNTAX)
# The same syntax without the bound on digits: a canonical number too long for it is out of range, said so.
_LONG_RANGE_RE = re.compile(r"(0|[1-9][0-9]*)(?:-(0|[1-9][0-9]*))?")


class RangeError(ValueError):
    """A range string that is malformed or not aligned; the message says why (becomes a 400)."""


@dataclass(frozen=True, order=True)
class Block:
    """An aligned block of entries ``[start, start + size)``; `size` is a power of two (1 = one entry)."""

    start: int
    size: int

    @property
    def end(self) -> int:
        """Last entry number inside the block (inclusive)."""
        return self.start + self.size - 1

    @property
    def level(self) -> int:
        """log2(size): 0 for an entry, k for a summary of 2**k entries."""
        return self.size.bit_length() - 1

    @property
    def is_entry(self) -> bool:
        return self.size == 1

    @property
    def label(self) -> str:
        """The wire form: ``"n"`` for one entry, ``"a-b"`` (inclusive) otherwise."""
        return str(self.start) if self.size == 1 else f"{self.start}-{self.end}"

    def halves(self) -> tuple[Block, Block]:
        """The two children of a block of size ≥ 2 (left = older)."""
        half = self.size // 2
        return Block(self.start, half), Block(self.start + half, half)

    def contains(self, other: Block) -> bool:
        return self.start <= other.start and other.end <= self.end

    def __str__(self) -> str:
        return self.label


def parse_range(text: object, *, allow_entry: bool = True, field: str = "range") -> Block:
    """Parse ``"n"`` or ``"a-b"`` (inclusive, canonical decimal) into an aligned Block.

    A summary range must have size 2**k (k ≥ 1) with ``a % size == 0`` (SPEC §4 Ranges). `allow_entry`
    False rejects the single-entry form. Numbers above MAX_SEQ are rejected. Raises RangeError with a
    message naming `field`.
    """
    if not isinstance(text, str):
        raise RangeError(f'{field}: must be a string such as "5" or "0-7", not {JSON_TYPE_NAMES[json_type_of(text)]}.')
    match = _RANGE_RE.fullmatch(text)
    if match is None and _LONG_RANGE_RE.fullmatch(text):  # more digits than the syntax takes (19)
        raise RangeError(
            f"{field}: {quoted(text, 40)} is not a range: entry numbers above {MAX_SEQ} are not supported."
        )
    if match is None:
        raise RangeError(f'{field}: {quoted(text, 40)} is not a range; write "n" for one entry or "a-b" (inclusive).')
    start = int(match.group(1))
    end = int(match.group(2)) if match.group(2) is not None else start
    if start > MAX_SEQ or end > MAX_SEQ:
        raise RangeError(f"{field}: entry numbers above {MAX_SEQ} are not supported.")
    if end < start:
        raise RangeError(f"{field}: {quoted(text)} ends before it starts.")
    size = end - start + 1
    if size == 1:
        if match.group(2) is not None:
            raise RangeError(f"{field}: {quoted(text)} is one entry; write it as {quoted(str(start))}.")
        if not allow_entry:
            raise RangeError(f'{field}: a single entry is not a summary range; use an aligned range "a-b".')
        return Block(start, 1)
    if size & (size - 1):
        raise RangeError(f"{field}: {quoted(text)} has {size} entries; a summary range has a power-of-two size ≥ 2.")
    if start % size:
        raise RangeError(f"{field}: {quoted(text)} is not aligned; its start must be a multiple of its size ({size}).")
    return Block(start, size)


def maximal_blocks(n: int) -> list[Block]:
    """The maximal aligned blocks of ``[0, n)`` from the left: one per set bit of `n`, largest first."""
    blocks: list[Block] = []
    start = 0
    for bit in range(n.bit_length() - 1, -1, -1):
        size = 1 << bit
        if n & size:
            blocks.append(Block(start, size))
            start += size
    return blocks


def cover(n: int, budget: int) -> list[Block]:
    """SPEC §4 wake cover of ``[0, n)`` with at most `budget` lines (or popcount(n) when that is larger).

    Start from `maximal_blocks(n)`; while there are fewer than `budget` blocks, split the newest
    (rightmost) block of size ≥ 2 into its halves. O(budget + log n).
    """
    blocks = maximal_blocks(n)
    # `i` is the index of the rightmost block of size ≥ 2; it only ever moves left or stays.
    i = len(blocks) - 1
    while i >= 0 and blocks[i].size == 1:
        i -= 1
    while len(blocks) < budget and i >= 0:
        left, right = blocks[i].halves()
        blocks[i : i + 1] = [left, right]
        if right.size >= 2:
            i += 1
        else:  # both halves are single entries: the next candidate is further left
            i -= 1
            while i >= 0 and blocks[i].size == 1:
                i -= 1
    return blocks


def needed_count(n: int) -> int:
    """How many summaries snapshot `n` needs: every aligned range of size ≥ 2 inside ``[0, n)``.

    Equals ``sum(n >> k for k ≥ 1) == n - popcount(n)``.
    """
    return n - n.bit_count()


def ranges_containing(block: Block, n: int) -> Iterator[Block]:
    """`block` (when size ≥ 2) and every aligned ancestor of it that lies inside ``[0, n)``, smallest first."""
    size = max(block.size, 2)
    while size <= n:
        start = block.start - block.start % size
        if start + size > n:
            return
        yield Block(start, size)
        size *= 2


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def child_text(body: str | None) -> str:
    """The text an entry contributes as a child (digest, nap job): its body, or "" once redacted (None)."""
    return REDACTED_TEXT if body is None else body


def child_kind(block: Block, body: str | None) -> str:
    """The kind of a child: ``entry``, ``redacted`` (an entry whose body is None) or ``summary``."""
    if not block.is_entry:
        return "summary"
    return "redacted" if body is None else "entry"


def source_digest(left: Block, left_text: str, right: Block, right_text: str) -> str:
    """SPEC §4 `source_digest` of a summary built from children `left` and `right`.

    Lowercase hex SHA-256 of the UTF-8 bytes of
    ``"memories-digest-v1\\n" + L + "\\n" + sha256hex(left_text) + "\\n" + R + "\\n" + sha256hex(right_text) + "\\n"``
    where L and R are the children's wire ranges (``"4"``/``"5"`` for entries, ``"0-3"`` for summaries).
    A redacted entry's text is ``""`` (`child_text`).
    """
    material = f"{DIGEST_PREFIX}{left.label}\n{sha256_hex(left_text)}\n{right.label}\n{sha256_hex(right_text)}\n"
    return sha256_hex(material)


def first_gap(starts: Iterable[int], size: int, limit: int) -> int | None:
    """The smallest multiple of `size` below `limit` that is not in the sorted `starts`, or None."""
    expected = 0
    for start in starts:
        if start != expected:
            break
        expected += size
    return expected if expected < limit else None


def classify(blocks: Iterable[Block], live: set[tuple[int, int]]) -> list[tuple[Block, str]]:
    """Pair each block with its line kind: single entries are `entry`; others `summary` when a live
    summary of exactly that range is in `live` (a set of ``(start, end)``), else `missing`."""
    out = []
    for block in blocks:
        if block.is_entry:
            out.append((block, "entry"))
        else:
            out.append((block, "summary" if (block.start, block.end) in live else "missing"))
    return out
