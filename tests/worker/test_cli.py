"""`memories-worker run`'s options: seconds are finite numbers in range, refused before anything starts."""

from __future__ import annotations

import click
import pytest

from worker.cli import main


def option_of(name: str) -> click.Option:
    return next(param for param in main.commands["run"].params if name in param.opts)


@pytest.mark.parametrize("name", ["--grace", "--flush-timeout", "--sync-interval", "--delete-after"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e9"])
def test_a_number_of_seconds_that_is_not_finite_or_beyond_a_day_is_refused(name, value):
    """`click.FloatRange` let `nan` and `inf` through: `--grace nan` made every wait `nan` (a breaker)."""
    option = option_of(name)
    with pytest.raises(click.BadParameter):
        option.type.convert(value, option, None)


@pytest.mark.parametrize(("name", "value"), [("--grace", "0"), ("--grace", "2.5"), ("--flush-timeout", "86400")])
def test_finite_seconds_in_range_are_taken(name, value):
    option = option_of(name)
    assert option.type.convert(value, option, None) == float(value)
