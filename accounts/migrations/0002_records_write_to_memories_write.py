"""Contract 2.0.0 (SPEC §7): tokens holding the retired `records:write` scope get `memories:write`.

`records:write` is removed, every other scope is kept in its order, and `memories:write` takes the
place of `records:write` unless the token already had it (no duplicates). Irreversible in meaning
(we cannot tell which `memories:write` came from `records:write`), so the reverse is a no-op.
"""

from django.db import migrations

OLD_SCOPE = "records:write"
NEW_SCOPE = "memories:write"


def migrate_scopes(scopes):
    """Return `scopes` with OLD_SCOPE replaced by NEW_SCOPE, order kept, without duplicates."""
    result = []
    for scope in scopes:
        scope = NEW_SCOPE if scope == OLD_SCOPE else scope
        if scope not in result:
            result.append(scope)
    return result


def forwards(apps, schema_editor):
    ApiToken = apps.get_model("accounts", "ApiToken")
    tokens = list(ApiToken.objects.filter(scopes__contains=[OLD_SCOPE]).only("id", "scopes"))
    for token in tokens:
        token.scopes = migrate_scopes(token.scopes)
    ApiToken.objects.bulk_update(tokens, ["scopes"], batch_size=1000)


class Migration(migrations.Migration):
    dependencies = [("accounts", "0001_initial")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop, elidable=True)]
