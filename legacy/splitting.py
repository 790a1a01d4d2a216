"""Split a document into entry-sized parts at Unicode boundaries (SPEC §7). Pure functions, no Django.

`split_document(text)` returns parts whose concatenation is `text` exactly, each at most `limit` UTF-8
bytes, never cut inside a code point, and never inside an extended grapheme cluster (UAX #29, via the
`regex` module's ``\\X``) unless that one cluster alone is larger than `limit`. Among the allowed cut
points in the last `near_end` bytes of a chunk, the one right after a newline wins, then the one right
after a space; otherwise the chunk is made as long as possible.
"""

from __future__ import annotations

from itertools import accumulate

import regex

ENTRY_MAX_BYTES = 1024
NEAR_END_BYTES = 256

_CLUSTER = regex.compile(r"\X")
# A position right after one of these matches is a grapheme-cluster boundary whatever came earlier:
# after LF (GB4), between two ASCII characters other than CR LF (no ASCII character is Extend, ZWJ,
# SpacingMark, Prepend, Regional_Indicator or Extended_Pictographic), after a CR not followed by LF.
# Segmentation can restart at such a position, so only the tail of a chunk has to be segmented.
_ANCHOR = regex.compile(r"\n|[\x00-\x0c\x0e-\x7f](?=[\x00-\x7f])|\r(?=[\x00-\x09\x0b-\x7f])")
_ANCHOR_LOOKBACK_CHARS = 64


def _prefix_chars(text: str, start: int, max_bytes: int) -> int:
    """Number of code points from `start` whose UTF-8 encoding fits in `max_bytes` (as many as possible)."""
    if max_bytes <= 0:
        return 0
    raw = text[start : start + max_bytes].encode("utf-8")
    # Truncating bytes may cut the last code point; "ignore" drops exactly that incomplete tail.
    return len(raw[:max_bytes].decode("utf-8", "ignore"))


def _boundaries(text: str, anchor: int, cut: int) -> list[int]:
    """Grapheme-cluster boundaries in ``(anchor, cut]``, given that `anchor` is a boundary.

    A boundary before index p depends only on ``text[:p + 1]``, so segmenting ``text[anchor:cut + 1]``
    gives exact boundaries up to `cut` (only the last, possibly truncated, cluster can be wrong).
    """
    ends = accumulate(map(len, _CLUSTER.findall(text, anchor, cut + 1)), initial=anchor)
    return [position for position in ends if anchor < position <= cut]


def split_document(text: str, *, limit: int = ENTRY_MAX_BYTES, near_end: int = NEAR_END_BYTES) -> list[str]:
    """Split `text` into parts of 1..`limit` UTF-8 bytes; ``"".join(parts) == text`` always.

    text: any str without lone surrogates (it must be encodable as UTF-8); "" gives [].
    limit: maximum part size in bytes (≥ 4, so that any code point fits); near_end: size in bytes of
    the zone at the end of a full chunk where a cut after a newline, else after a space, is preferred.
    Cuts fall on grapheme-cluster boundaries; a cluster larger than `limit` on its own (e.g. a letter
    with thousands of combining marks) is cut between its code points, and only there.
    Raises ValueError when `limit` < 4.
    """
    if limit < 4:
        raise ValueError("limit must be at least 4 bytes (one code point).")
    if not text:
        return []
    if len(text) * 4 <= limit or len(text.encode("utf-8")) <= limit:
        return [text]
    parts: list[str] = []
    start, length = 0, len(text)
    giant_end = 0  # end of the last oversized cluster met; positions before it may be cut at code points
    ascii_only = text.isascii()
    while start < length:
        cut = start + _prefix_chars(text, start, limit)
        if cut >= length:
            parts.append(text[start:])
            break
        low = start + _prefix_chars(text, start, limit - near_end)
        candidates = _allowed_cuts(text, start, low, cut, giant_end, ascii_only)
        if not candidates:
            # The cluster starting at `start` alone exceeds `limit`: cut it between code points.
            giant_end = _CLUSTER.match(text, start).end()
            end = cut
        else:
            end = _preferred(text, candidates, low)
        parts.append(text[start:end])
        start = end
    return parts


def _allowed_cuts(text: str, start: int, low: int, cut: int, giant_end: int, ascii_only: bool) -> list[int]:
    """Allowed cut positions in ``(start, cut]`` that matter: every one in ``[low, cut]`` plus the last.

    Empty when the cluster beginning at `start` extends past `cut` (and `start` is not inside an
    oversized cluster), i.e. that cluster is larger than the limit by itself.
    """
    if start < giant_end:
        # Inside an oversized cluster every code point boundary up to its end is allowed.
        if giant_end >= cut:
            return [cut]
        inside = list(range(max(start + 1, low), giant_end + 1))
        return inside + _boundaries(text, giant_end, cut) or [giant_end]
    if ascii_only:
        # Every position is a boundary except inside CR LF; two candidates always leave one.
        return [p for p in range(max(start + 1, low - 1), cut + 1) if not (text[p - 1] == "\r" and text[p] == "\n")]
    anchor = start
    if low - _ANCHOR_LOOKBACK_CHARS > start:
        match = _ANCHOR.search(text, low - _ANCHOR_LOOKBACK_CHARS, low)
        if match is not None:
            anchor = match.end()
    found = _boundaries(text, anchor, cut)
    if not found and anchor > start:
        return [anchor]  # the cluster at `anchor` straddles the cut; `anchor` itself is a boundary
    return found


def _preferred(text: str, candidates: list[int], low: int) -> int:
    """Pick the cut: the last one after a newline in ``[low, …]``, else after a space, else the last."""
    for wanted in ("\n", " "):
        for position in reversed(candidates):
            if position < low:
                break
            if text[position - 1] == wanted:
                return position
    return candidates[-1]
