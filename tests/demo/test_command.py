"""`manage.py demo_real_input` and its server, beyond the shared slice: output, edge cases, this machine."""

from __future__ import annotations

import io

import httpx
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from demo.changelogs import DEFAULT_SOURCE, discover
from demo.server import gunicorn_server
from memories.models import Entry
from tests.demo.conftest import CHANGELOGS, write_changelog
from tests.demo.helpers import run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def alpha_only(tmp_path):
    """One package: three entries, one over 1,024 bytes (six notes)."""
    write_changelog(tmp_path, "alpha-tools", "\n\n".join(CHANGELOGS["alpha-tools"]) + "\n")
    return tmp_path


def test_the_command_prints_every_part_of_the_demo(live_server, alpha_only):
    out = io.StringIO()
    call_command(
        "demo_real_input",
        *("--api-url", live_server.url, "--source", str(alpha_only), "--agents", "2", "--mirror", "1"),
        stdout=out,
    )
    printed = out.getvalue()
    needles = ("stand-in", "wake (budget 32)", "0 missing", "spans: [", "zoom range=0-", "1 memory_prefix")
    assert [needle for needle in needles if needle not in printed] == []


def test_the_command_fails_when_a_check_fails(live_server, tmp_path):
    with pytest.raises(CommandError, match="changelogs found"):
        call_command("demo_real_input", "--api-url", live_server.url, "--source", str(tmp_path), stdout=io.StringIO())


def test_an_empty_source_is_reported(live_server, tmp_path):
    result, printed = run(live_server.url, tmp_path)
    assert not result.ok and "nothing to do" in printed


@pytest.mark.skipif(not discover(DEFAULT_SOURCE), reason="no Debian changelogs on this machine")
def test_a_slice_of_this_machines_changelogs_runs_end_to_end(live_server, tmp_path):
    smallest = sorted(discover(DEFAULT_SOURCE), key=lambda path: path.stat().st_size)[:3]
    for path in smallest:  # the machine's real files, linked into a folder of their own
        (tmp_path / path.parent.name).mkdir()
        (tmp_path / path.parent.name / path.name).symlink_to(path.resolve())
    result, _ = run(live_server.url, tmp_path, packages=3, mirror=3, agents=2)
    assert result.ok and 1 <= result.packages <= len(smallest)  # copies of one changelog count once
    assert Entry.objects.filter(store_id=result.store_id).count() == result.parsed_notes > 0


def test_the_demo_server_serves_and_stops():
    with gunicorn_server(workers=1, ready_path="/healthz") as url:
        assert httpx.get(f"{url}/healthz").status_code == 200
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/healthz", timeout=2.0)
