"""Pure parts of the demo runner: which agent writes which package, and the wake-cover check."""

from __future__ import annotations

from demo.changelogs import parse_changelog
from demo.runner import _covers, assign
from tests.demo.conftest import entry


def changelog(package: str):
    return parse_changelog(entry(package, "1-1", "  * x"), package=package)


def test_a_package_goes_to_the_same_agent_whatever_else_is_loaded():
    few = [changelog(name) for name in ("alpha", "beta")]
    many = [changelog(name) for name in ("zeta", "alpha", "gamma", "beta", "delta")]

    def slot_of(lists, package):
        return next(i for i, todo in enumerate(lists) if package in [c.package for c in todo])

    for package in ("alpha", "beta"):
        assert slot_of(assign(few, 4), package) == slot_of(assign(many, 4), package)


def test_every_package_is_assigned_exactly_once():
    many = [changelog(f"pkg{n}") for n in range(50)]
    lists = assign(many, 4)
    assert sorted(c.package for todo in lists for c in todo) == sorted(c.package for c in many)
    assert all(todo for todo in lists)  # 50 names spread over 4 agents leave none idle


def test_covers_accepts_only_an_exact_in_order_cover():
    assert _covers([{"range": "0-3"}, {"range": "4"}, {"range": "5"}], 6)
    assert not _covers([{"range": "0-3"}, {"range": "5"}], 6)  # a gap
    assert not _covers([{"range": "0-3"}, {"range": "4"}], 6)  # short
    assert _covers([], 0)
