"""factory-boy generator of realistic pre-2.0 legacy data for the 0041 import tests and benchmark.

Text mixes scripts and the hard cases of Unicode segmentation: CJK, Hangul, Arabic and Hebrew (RTL),
Devanagari conjuncts, combining marks, emoji ZWJ sequences with skin tones, flags, keycaps, CR LF.
Descriptions range from empty to 50 KB. All randomness comes from factory-boy's seeded generator.
"""

from __future__ import annotations

import datetime as dt

import factory
from factory.random import randgen

from legacy.models import Assessment, Record, RecordStatus, Revision, Verdict
from tests.factories import ProjectFactory, UserFactory

SNIPPETS = [
    "Quarterly notes on the supplier contract",
    "remember to call Ana before Friday",
    "漢字と仮名の混じった文章です。",
    "机器学习模型的评估结果",
    "한국어 문장도 들어 있습니다",
    "مرحبا بالعالم، هذه ملاحظة قصيرة",
    "كَتَبَ الطَّالِبُ الدَّرْسَ",  # Arabic with harakat (combining marks)
    "שלום עולם",
    "क्षत्रिय और ज्ञान",  # Devanagari conjuncts (virama)
    "Zoë, naïve café, résumé",
    "e\u0301 a\u0308 o\u0303\u0301",  # decomposed accents: base + combining marks
    "👩🏽\u200d💻 and 👨\u200d👩\u200d👧\u200d👦",  # ZWJ sequences with a skin tone
    "👍🏿👋🏻🧑🏾\u200d🚀",
    "🇯🇵🇫🇷🇧🇷🇺🇦",  # flags: regional-indicator pairs
    "🏳️\u200d🌈 #️⃣ 1️⃣",  # variation selectors and keycaps
    "price: 12,50 €",
    "line one\r\nline two",
    "- [ ] todo\n- [x] done",
    "`code` and **bold**",
]
SEPARATORS = [" ", " ", " ", "\n", "\n\n", "", "\t"]
DESCRIPTION_BYTES = [0, 0, 12, 200, 700, 1000, 1018, 1024, 1030, 2500, 6000, 20_000, 50_000]


def multilingual_text(target_bytes: int) -> str:
    """Random multilingual text of at least `target_bytes` UTF-8 bytes (0 gives "")."""
    pieces: list[str] = []
    size = 0
    while size < target_bytes:
        piece = randgen.choice(SNIPPETS) + randgen.choice(SEPARATORS)
        pieces.append(piece)
        size += len(piece.encode("utf-8"))
    return "".join(pieces)


def random_label() -> str:
    label = multilingual_text(randgen.randint(1, 120))
    return label[:255] or "untitled"


BASE_TIME = dt.datetime(2021, 3, 1, 9, 30, tzinfo=dt.UTC)


def random_created_at() -> dt.datetime:
    """Times spread over two years, on whole minutes so that some records share a timestamp."""
    return BASE_TIME + dt.timedelta(minutes=randgen.randint(0, 2 * 365 * 24 * 60 // 97) * 97)


class LegacyRecordFactory(factory.django.DjangoModelFactory):
    """A flat record; created_at is random (not in id order) and some records share a timestamp."""

    class Meta:
        model = Record

    author = factory.SubFactory(UserFactory)
    project = None
    key = factory.Sequence(lambda n: f"rec-{n:06d}")
    label = factory.LazyFunction(random_label)
    description = factory.LazyFunction(lambda: multilingual_text(randgen.choice(DESCRIPTION_BYTES)))
    status = factory.LazyFunction(lambda: randgen.choice(list(RecordStatus.values)))
    price = factory.LazyFunction(lambda: randgen.choice([None, 0, 99, 1250, 4_999_00, 2**40]))
    created_at = factory.LazyFunction(random_created_at)
    updated_at = factory.LazyAttribute(lambda o: o.created_at + dt.timedelta(seconds=randgen.randint(0, 10**6)))


class LegacyAssessmentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Assessment

    record = factory.SubFactory(LegacyRecordFactory)
    assessor = factory.SubFactory(UserFactory)
    verdict = factory.LazyFunction(lambda: randgen.choice(list(Verdict.values)))
    score = factory.LazyFunction(lambda: randgen.choice([None, 1, 3, 5]))
    text = factory.LazyFunction(lambda: multilingual_text(randgen.choice([0, 40, 400])))
    created_at = factory.LazyAttribute(lambda o: o.record.created_at + dt.timedelta(days=1))


class LegacyRevisionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Revision

    record = factory.SubFactory(LegacyRecordFactory)
    editor = factory.LazyAttribute(lambda o: o.record.author)
    label = factory.LazyFunction(random_label)
    description = factory.LazyFunction(lambda: multilingual_text(randgen.choice([0, 300, 3000])))
    created_at = factory.LazyAttribute(lambda o: o.record.created_at + dt.timedelta(hours=2))


def legacy_world(*, authors: int = 4, projects: int = 2, records: int = 36) -> dict:
    """Build a realistic legacy data set and return ``{"authors", "projects", "records"}``.

    Several authors and projects; every description size class (empty to 50 KB); records with and
    without prices and projects; assessments (by other users too) and revisions. Plus edge records:
    a document exactly 1,024 bytes long, one of 1,025 bytes, and one holding a single grapheme cluster
    larger than 1,024 bytes (a letter with 600 combining acute accents).
    """
    people = UserFactory.create_batch(authors)
    groups = ProjectFactory.create_batch(projects)
    made = []
    for index in range(records):
        record = LegacyRecordFactory(
            author=people[index % authors],
            project=groups[index % projects] if index % 3 else None,
            description=multilingual_text(DESCRIPTION_BYTES[index % len(DESCRIPTION_BYTES)]),
        )
        for _ in range(randgen.randint(0, 2)):
            LegacyAssessmentFactory(record=record, assessor=randgen.choice(people))
        for _ in range(randgen.randint(0, 2)):
            LegacyRevisionFactory(record=record)
        made.append(record)
    # Edge cases: document sizes around the limit, and one cluster bigger than the limit.
    made.append(LegacyRecordFactory(author=people[0], label="exact", description="x" * (1024 - len("exact\n\n"))))
    made.append(LegacyRecordFactory(author=people[0], label="over", description="y" * (1025 - len("over\n\n"))))
    giant = "a" + "\u0301" * 600  # one grapheme cluster of 1,201 bytes
    made.append(LegacyRecordFactory(author=people[1], label="giant cluster", description=f"before {giant} after"))
    # Two records with the same created_at: the id breaks the tie.
    twin_time = BASE_TIME + dt.timedelta(days=3)
    made += LegacyRecordFactory.create_batch(2, author=people[2], created_at=twin_time)
    return {"authors": people, "projects": groups, "records": made}
