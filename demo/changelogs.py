"""Debian package changelogs as demo input: find them, parse their entries, cut entries into notes.

Pure functions, no Django and no network. A changelog entry runs from its header line
``package (version) distribution(s); urgency=…`` through its trailer line ``" -- Maintainer <email>  date"``
(Debian Policy §4.4). An entry's `text` is the exact slice of the file between those two lines, both
included (no trimming, no re-wrapping, no normalisation); its notes are that text cut with the 0041
splitter (`legacy.splitting.split_document`) when it is over 1,024 UTF-8 bytes, so
``"".join(notes) == text`` always.
"""

from __future__ import annotations

import gzip
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from legacy.splitting import ENTRY_MAX_BYTES, split_document

DEFAULT_SOURCE = Path("/usr/share/doc")
CHANGELOG_NAME = "changelog.Debian.gz"

# Debian Policy §4.4 / dpkg-parsechangelog: the header starts in column 0 with the source package name,
# the version in parentheses, one or more distributions, a ';' and keyword=value pairs.
_HEADER = re.compile(r"^(?P<package>\w[-+0-9a-z.]*) \((?P<version>[^()\s]+)\)(?:\s+[-+0-9a-z./]+)+;.*$", re.I)
# The trailer: exactly one space, two dashes, one space, the maintainer, then the date after spaces.
_TRAILER = re.compile(r"^ -- (?P<maintainer>.*?<[^>]*>)\s+(?P<date>\S.*?)\s*$")
_NONCE_MAX_CHARS = 128


@dataclass(frozen=True)
class ChangelogEntry:
    """One changelog entry. `ordinal` counts entries from the oldest (0) in its file; `text` is exact and
    equals ``changelog.text[start:end]`` (offsets in code points)."""

    package: str
    version: str
    ordinal: int
    text: str
    start: int = 0
    end: int = 0
    repeat: int = 0  # earlier (older) entries of this file with the same version and text

    @property
    def digest(self) -> str:
        """First 16 hex digits of the SHA-256 of the entry's UTF-8 text (part of its nonce)."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()[:16]

    @property
    def header(self) -> str:
        """The entry's first line (``pkg (version) dist; urgency=…``)."""
        return self.text.split("\n", 1)[0]

    def notes(self, *, limit: int = ENTRY_MAX_BYTES) -> list[str]:
        """The entry cut into note bodies of 1..`limit` UTF-8 bytes (one part when it fits), joined = `text`."""
        return split_document(self.text, limit=limit)


@dataclass
class Changelog:
    """One package's changelog: its entries, newest first as in the file, and what the parser skipped.

    `package` is the folder name under /usr/share/doc (the binary package); `text` is the decoded file;
    `encoding` is "utf-8" or "latin-1" (old changelogs that are not valid UTF-8); `malformed` counts
    headers without a trailer before the next header or the end; `skipped_nul` counts entries dropped
    because they contain U+0000, which no Memories text may hold.
    """

    package: str
    path: Path
    text: str
    encoding: str
    entries: list[ChangelogEntry] = field(default_factory=list)
    malformed: int = 0
    skipped_nul: int = 0

    def chronological(self) -> list[ChangelogEntry]:
        """Entries oldest first (the order a log of releases is written in)."""
        return sorted(self.entries, key=lambda entry: entry.ordinal)


def decode(raw: bytes) -> tuple[str, str]:
    """Decode a changelog: UTF-8 when valid, else Latin-1 (what pre-UTF-8 Debian changelogs used).

    Returns ``(text, encoding)``. Latin-1 decodes any byte string, so this never raises.
    """
    try:
        return raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return raw.decode("latin-1"), "latin-1"


def parse_changelog(text: str, *, package: str, path: Path | None = None, encoding: str = "utf-8") -> Changelog:
    """Parse the entries of one changelog `text` (already decoded).

    Lines outside entries (blank lines, Emacs local-variable blocks, free-form "Old Changelog" notes) are
    ignored. A header seen while an entry is still open (no trailer yet) drops the open one and counts it
    in `malformed`. Entry text keeps the file's bytes exactly, including any CR before the line feeds.
    """
    changelog = Changelog(package=package, path=path or Path(package), text=text, encoding=encoding)
    found: list[tuple[str, int, int]] = []  # (version, start offset, end offset) in file order
    open_start: int | None = None
    open_version = ""
    offset = 0
    for line in text.split("\n"):
        line_end = offset + len(line)
        bare = line[:-1] if line.endswith("\r") else line
        header = _HEADER.match(bare)
        if header:
            if open_start is not None:
                changelog.malformed += 1
            open_start, open_version = offset, header.group("version")
        elif open_start is not None and _TRAILER.match(bare):
            found.append((open_version, open_start, offset + len(bare)))  # the line ending is not part of it
            open_start = None
        offset = line_end + 1
    if open_start is not None:
        changelog.malformed += 1
    total = len(found)
    seen: dict[tuple[str, str], int] = {}
    for index in range(total - 1, -1, -1):  # oldest first, so `repeat` counts older duplicates
        version, start, end = found[index]
        body = text[start:end]
        if "\x00" in body:
            changelog.skipped_nul += 1
            continue
        repeat = seen[version, body] = seen.get((version, body), -1) + 1
        changelog.entries.append(
            ChangelogEntry(
                package=package,
                version=version,
                ordinal=total - 1 - index,
                text=body,
                start=start,
                end=end,
                repeat=repeat,
            )
        )
    changelog.entries.reverse()  # newest first, as in the file
    return changelog


def read_changelog(path: Path) -> Changelog:
    """Read and parse one ``<package>/changelog.Debian.gz`` (the folder name is the package name)."""
    text, encoding = decode(gzip.decompress(path.read_bytes()))
    return parse_changelog(text, package=path.parent.name, path=path, encoding=encoding)


def discover(source: Path = DEFAULT_SOURCE) -> list[Path]:
    """Every ``<source>/*/changelog.Debian.gz`` that is a regular file, sorted by package name.

    Symlinked doc folders (Debian links some packages' docs to another package's) are followed, but a
    changelog reached twice through links is listed once.
    """
    seen: set[Path] = set()
    paths: list[Path] = []
    for path in sorted(Path(source).glob(f"*/{CHANGELOG_NAME}")):
        try:
            real = path.resolve(strict=True)
        except OSError:
            continue
        if real.is_file() and real not in seen:
            seen.add(real)
            paths.append(path)
    return paths


def unique_changelogs(changelogs: list[Changelog]) -> tuple[list[Changelog], int]:
    """`changelogs` without those whose entries equal an earlier one's; returns ``(kept, dropped)``.

    Binary packages built from one source package ship copies of its changelog that differ only outside
    the entries (Debian's trimming note names the binary package): loading each copy would store the same
    release notes several times. A changelog without entries is dropped too (it has nothing to load).
    """
    seen: set[bytes] = set()
    kept: list[Changelog] = []
    for changelog in changelogs:
        key = hashlib.sha256("\x00".join(entry.text for entry in changelog.entries).encode("utf-8")).digest()
        if changelog.entries and key not in seen:
            seen.add(key)
            kept.append(changelog)
    return kept, len(changelogs) - len(kept)


def note_nonce(entry: ChangelogEntry, part: int) -> str:
    """The `client_nonce` of part `part` (0-based) of `entry`: stable across runs, at most 128 characters.

    ``deb:<package>:<version>:<digest>[~<repeat>]:<part>`` — from the entry's content, not its position,
    so a re-run after a package upgrade (new entries on top, or Debian trimming old ones) replays every
    unchanged entry and adds the new ones without a nonce conflict. When too long:
    ``deb:sha256:<hex of it>``.
    """
    repeat = f"~{entry.repeat}" if entry.repeat else ""
    nonce = f"deb:{entry.package}:{entry.version}:{entry.digest}{repeat}:{part}"
    if len(nonce) <= _NONCE_MAX_CHARS:
        return nonce
    return "deb:sha256:" + hashlib.sha256(nonce.encode("utf-8")).hexdigest()


def file_prefix(changelog: Changelog, *, max_bytes: int) -> str:
    """The changelog text cut after the last whole entry that fits in `max_bytes` UTF-8 bytes.

    The whole text when it fits. Otherwise the file from its start through the trailer of the last
    newest-first entry that fits (at least the first entry, cut by the splitter if that alone is too long).
    Used to mirror changelogs as file memories, whose content is limited to 102,400 bytes (SPEC §5).
    """
    if len(changelog.text.encode("utf-8")) <= max_bytes:
        return changelog.text
    best = ""
    for entry in sorted(changelog.entries, key=lambda e: -e.ordinal):
        candidate = changelog.text[: entry.end]
        if len(candidate.encode("utf-8")) > max_bytes:
            break
        best = candidate
    return best or split_document(changelog.text, limit=max_bytes)[0]
