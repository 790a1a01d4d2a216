"""The extractive stand-in summariser (demo.summariser): bounded, deterministic, extractive, labelled."""

from __future__ import annotations

from demo.summariser import STAND_IN_MODEL, StandInSummariser


def job(kind: str, left: str, right: str) -> dict:
    return {"children": [{"range": "0", "kind": kind, "text": left}, {"range": "1", "kind": kind, "text": right}]}


def test_two_entries_give_their_first_lines():
    left, right = "\np (1-1) unstable; urgency=low\n\n  * x", "q (2) x; y\n  * z"
    summary = StandInSummariser().summarise(job("entry", left, right))
    assert summary == "p (1-1) unstable; urgency=low\nq (2) x; y"


def test_two_summaries_give_an_order_keeping_sample_within_1024_bytes():
    left = "\n".join(f"left {n:03d} " + "é" * 20 for n in range(40))
    right = "\n".join(f"right {n:03d} " + "é" * 20 for n in range(40))
    summary = StandInSummariser().summarise(job("summary", left, right))
    lines = summary.split("\n")
    assert len(summary.encode("utf-8")) <= 1024
    assert lines[0] == left.split("\n")[0] and any(line.startswith("right") for line in lines)
    source = left.split("\n") + right.split("\n")
    assert [source.index(line) for line in lines] == sorted(source.index(line) for line in lines)


def test_an_overlong_first_line_is_trimmed_at_a_character_boundary():
    summary = StandInSummariser().summarise(job("entry", "ü" * 2000, "b"))
    first = summary.split("\n")[0]
    assert first.endswith("…") and set(first[:-1]) == {"ü"}
    assert len(summary.encode("utf-8")) <= 1024


def test_the_same_job_gives_the_same_summary():
    one = job("summary", "a\nb\nc", "d\ne")
    assert StandInSummariser().summarise(one) == StandInSummariser().summarise(one)


def test_the_model_id_says_it_is_a_stand_in():
    assert "stand-in" in StandInSummariser.model and "not a model" in STAND_IN_MODEL
