"""`manage.py demo_real_input`: the main job on real input — Debian changelogs through the HTTP API.

Thin over `demo.runner.run_demo` (see there and docs/demo.md). Exits with status 1 when a check failed.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from rich.console import Console

from demo import runner


def positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError(value)
    return number


def non_negative_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError(value)
    return number


def latency_range(value: str) -> tuple[float, float]:
    """``"50-150"`` → (50.0, 150.0); ``"0"`` → (0.0, 0.0)."""
    low, _, high = value.partition("-")
    bounds = (float(low), float(high or low))
    if not 0 <= bounds[0] <= bounds[1] <= 60_000:
        raise ValueError(value)
    return bounds


class Command(BaseCommand):
    help = (
        "Load the machine's Debian changelogs (/usr/share/doc/*/changelog.Debian.gz) into a project store "
        "through the HTTP API with parallel agents, compact it with a deterministic STAND-IN summariser, "
        "print wake, recall and zoom, and mirror changelogs as file memories through the anthropic SDK."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--packages",
            type=positive_int,
            default=runner.DEFAULT_PACKAGES,
            help=f"How many packages' changelogs to load (default {runner.DEFAULT_PACKAGES}, a few minutes here).",
        )
        parser.add_argument(
            "--agents", type=positive_int, default=runner.DEFAULT_AGENTS, help="Parallel agents (default 4)."
        )
        parser.add_argument(
            "--api-url",
            default=None,
            help="A running server on the same database (default: start gunicorn on a free loopback port).",
        )
        parser.add_argument("--seed", type=int, default=0, help="Seed of the package shuffle (default 0).")
        parser.add_argument(
            "--source", type=Path, default=runner.DEFAULT_SOURCE, help="Folder of <package>/changelog.Debian.gz."
        )
        parser.add_argument("--project", default=runner.DEFAULT_PROJECT, help="Project slug (default %(default)s).")
        parser.add_argument(
            "--mirror",
            type=non_negative_int,
            default=runner.DEFAULT_MIRROR,
            help=f"Changelogs mirrored as file memories (default {runner.DEFAULT_MIRROR}; 0 skips).",
        )
        parser.add_argument("--budget", type=int, choices=range(32, 129), default=32, metavar="32..128")
        parser.add_argument("--pattern", default=runner.DEFAULT_PATTERN, help="RE2 pattern for recall.")
        parser.add_argument("--show", type=non_negative_int, default=12, help="Recall matches printed (default 12).")
        parser.add_argument(
            "--nap-limit",
            type=int,
            choices=range(1, 17),
            default=runner.DEFAULT_NAP_LIMIT,
            metavar="1..16",
            help=f"Jobs each agent naps and claims at once (default {runner.DEFAULT_NAP_LIMIT}).",
        )
        parser.add_argument(
            "--llm-latency",
            type=latency_range,
            default=runner.DEFAULT_LLM_LATENCY_MS,
            metavar="LOW-HIGH",
            help="Milliseconds the stand-in summariser pauses per call, like an LLM (default 50-150; 0 disables).",
        )

    def handle(self, *args, verbosity: int, **options):
        stream = self.stdout._out
        console = Console(file=stream, highlight=False, width=None if stream.isatty() else 120)
        demo_options = runner.DemoOptions(
            packages=options["packages"],
            agents=options["agents"],
            api_url=options["api_url"],
            seed=options["seed"],
            source=options["source"],
            project=options["project"],
            mirror=options["mirror"],
            budget=options["budget"],
            pattern=options["pattern"],
            show=options["show"],
            nap_limit=options["nap_limit"],
            llm_latency=options["llm_latency"],
            progress=verbosity >= 1 and console.is_terminal and not os.environ.get("CI"),
        )
        result = runner.run_demo(demo_options, console)
        if not result.ok:
            raise CommandError("some checks failed: " + ", ".join(k for k, v in result.checks.items() if not v))
