"""Split a document into entry-sized parts at Unicode boundaries (SPEC §7). Pure functions, no Django.

`split_document(text)` returns parts whose concatenation is `text` exactly, each at most `limit` UTF-8
bytes, never cut inside a code point, and never inside an extended grapheme cluster (UAX #29, via the
`regex` module's ``\\X``) unless that one cluster alone is larger than `limit`. Among the allowed cut
points in the last `near_end` bytes of a chunk, the one right after a newline wins, then the one right
after a space; otherwise the chunk is made as long as possible.
"""

from __future__ import annotations

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


def _last_boundary(text: str, anchor: int, cut: int) -> int | None:
    """The last grapheme-cluster boundary in ``(anchor, cut]`` (None if there is none); `anchor` is one.

    A boundary before index p depends only on ``text[:p + 1]`` (UAX #29 rules look backwards), so
    segmenting ``text[anchor:cut + 1]`` is exact up to `cut`: the last cluster found there (possibly
    truncated) starts at the last boundary not after `cut`.
    """
    clusters = _CLUSTER.findall(text, anchor, cut + 1)
    last_start = cut + 1 - len(clusters[-1])
    return last_start if last_start > anchor else None


def _last_anchor(text: str, low: int, cut: int) -> int | None:
    """The last position in ``(low, cut]`` that is certainly a cluster boundary (see `_ANCHOR`), or None."""
    found = None
    for match in _ANCHOR.finditer(text, low, cut + 1):
        if match.end() <= cut:
            found = match.end()
    return found if found is not None and found > low else None


def _is_boundary_after_space(text: str, position: int) -> bool:
    """Whether a cut right after the space at ``position - 1`` falls between two clusters
    (it does not when a combining mark or ZWJ follows the space)."""
    return _CLUSTER.match(text, position - 1).end() == position


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
        low = max(start + 1, start + _prefix_chars(text, start, limit - near_end))
        end = _preferred_cut(text, low, cut)
        if end is None:
            end, giant_end = _hard_cut(text, start, cut, giant_end, ascii_only)
        parts.append(text[start:end])
        start = end
    return parts


def _preferred_cut(text: str, low: int, cut: int) -> int | None:
    """The last position in ``[low, cut]`` right after a newline (always a boundary: UAX #29 GB4),
    else the last one right after a space that is a boundary; None when there is neither."""
    newline = text.rfind("\n", low - 1, cut)
    if newline >= 0:
        return newline + 1
    space = text.rfind(" ", low - 1, cut)
    while space >= 0:
        if _is_boundary_after_space(text, space + 1):
            return space + 1
        space = text.rfind(" ", low - 1, space)
    return None


def _hard_cut(text: str, start: int, cut: int, giant_end: int, ascii_only: bool) -> tuple[int, int]:
    """The longest allowed part from `start` (a boundary, or inside an oversized cluster ending at
    `giant_end`) not past `cut`. Returns ``(end, giant_end)``, the latter updated when the cluster at
    `start` turns out to be larger than the limit by itself."""
    if start < giant_end:
        if giant_end >= cut:
            return cut, giant_end  # inside an oversized cluster every code point boundary is allowed
        anchor = _last_anchor(text, giant_end, cut) or giant_end
        return (_last_boundary(text, anchor, cut) or anchor), giant_end
    if ascii_only:
        # Every position is a boundary except inside CR LF.
        return (cut - 1 if text[cut - 1] == "\r" and text[cut] == "\n" else cut), giant_end
    anchor = _last_anchor(text, max(start, cut - _ANCHOR_LOOKBACK_CHARS), cut) or start
    end = _last_boundary(text, anchor, cut)
    if end is not None:
        return end, giant_end
    if anchor > start:
        return anchor, giant_end  # the cluster at `anchor` straddles the cut
    # The cluster starting at `start` alone exceeds the limit: cut it between code points.
    return cut, _CLUSTER.match(text, start).end()
