"""Fixtures for the real-input demo: a folder of small, generated `changelog.Debian.gz` files."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

TRAILER = " -- {who}  {date}"


def entry(package: str, version: str, body: str, *, dist: str = "unstable", urgency: str = "medium") -> str:
    """One changelog entry in Debian format (header, blank, body, blank, trailer), without a final newline."""
    who = "Ana Müller <ana@example.org>"
    return f"{package} ({version}) {dist}; urgency={urgency}\n\n{body}\n\n" + TRAILER.format(
        who=who, date="Tue, 20 Sep 2022 12:17:15 +0200"
    )


def long_body() -> str:
    """A body well over 1,024 UTF-8 bytes with multi-byte text, combining marks and emoji."""
    bullets = [
        f"  * Fix naïve handling of café names ({n}): e\u0301 and 👩‍💻 must survive, see CVE-2021-{4000 + n}."
        for n in range(30)
    ]
    return "\n".join(bullets)


# Package name → entries, newest first (as in a real changelog).
CHANGELOGS: dict[str, list[str]] = {
    "alpha-tools": [
        entry("alpha-tools", "2.1-1", "  * Security: fix CVE-2024-1234 and cve-2023-45678.", urgency="high"),
        entry("alpha-tools", "2.0-2", long_body()),
        entry("alpha-tools", "2.0-1", "  * New upstream release.\n  * Closes: #991591"),
    ],
    "beta-lib": [
        entry("beta-lib", "1:0.9+dfsg-3", "  * Rebuild for bookworm.", dist="bookworm-security"),
        entry("beta-lib", "1:0.9+dfsg-2", "  * Team upload.\n  [ Jordi ]\n  * Update Standards-Version."),
    ],
    "gamma-daemon": [
        entry("gamma-daemon", f"1.{n}-1", f"  * Release {n}." + (" Fixes CVE-2020-0042." if n == 7 else ""))
        for n in range(40, 0, -1)
    ],
}


def write_changelog(folder: Path, package: str, text: str, *, encoding: str = "utf-8") -> Path:
    """Write ``folder/<package>/changelog.Debian.gz`` holding `text` and return its path."""
    path = folder / package / "changelog.Debian.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(text.encode(encoding)))
    return path


@pytest.fixture
def changelog_dir(tmp_path) -> Path:
    """Three packages (45 entries, one over 1,024 bytes) as `<pkg>/changelog.Debian.gz` under a temp folder;
    an Emacs local-variables block trails one file, as in real changelogs."""
    folder = tmp_path / "doc"
    for package, entries in CHANGELOGS.items():
        text = "\n\n".join(entries) + "\n"
        if package == "beta-lib":
            text += "\nLocal variables:\nmode: debian-changelog\nEnd:\n"
        write_changelog(folder, package, text)
    return folder


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Users created by the demo's set-up get no password; keep the hasher cheap anyway."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
