"""The legacy archives are visible read-only in the back office for migration audits (SPEC §6, §7)."""

from __future__ import annotations

import pytest
from django.test import Client

from legacy import services
from legacy.models import ArchivedRecord
from tests.legacy.factories import LegacyRecordFactory


@pytest.fixture
def staff_browser(staff):
    browser = Client()
    browser.force_login(staff)
    return browser


@pytest.mark.django_db
def test_staff_can_list_and_view_archived_records_but_not_add_change_or_delete_them(staff_browser):
    record = LegacyRecordFactory(label="audited label")
    services.archive_legacy_rows()
    archived = ArchivedRecord.objects.get(source_id=record.pk)
    base = "/backoffice/legacy/archivedrecord/"
    assert staff_browser.get(base).status_code == 200
    detail = staff_browser.get(f"{base}{archived.pk}/change/")
    assert detail.status_code == 200
    assert "audited label" in detail.content.decode()
    assert b'name="_save"' not in detail.content
    assert staff_browser.get(f"{base}add/").status_code == 403
    assert staff_browser.post(f"{base}{archived.pk}/delete/", {"post": "yes"}).status_code == 403
    assert ArchivedRecord.objects.filter(pk=archived.pk).exists()
