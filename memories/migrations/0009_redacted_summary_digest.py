"""A redacted summary keeps no `source_digest` (2026-12-06): the digest hashes the redacted entry's text, and
an export holds the sibling's text beside it, so the digest told whether a guess of the redacted text was
right (a breaker recovered a key's last digits offline). Existing redacted rows lose theirs here; the
constraint then holds the rule: `summary_md` and `source_digest` are null exactly when `redacted_at` is set.
"""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('memories', '0008_watermark_holes'),
        ('stores', '0006_store_rights_version'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='summary',
            name='summary_redaction_shape',
        ),
        migrations.AlterField(
            model_name='summary',
            name='source_digest',
            field=models.CharField(blank=True, max_length=64, null=True),
        ),
        migrations.RunSQL(
            "UPDATE memories_summary SET source_digest = NULL WHERE redacted_at IS NOT NULL",
            reverse_sql=migrations.RunSQL.noop,  # the digests are gone; going back keeps them null (the old
            # constraint allows a null only if the column does: reversing the AlterField fails on such rows)
        ),
        migrations.AddConstraint(
            model_name='summary',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('redacted_at__isnull', True), ('source_digest__isnull', False), ('summary_md__isnull', False)), models.Q(('invalidated_at__isnull', False), ('redacted_at__isnull', False), ('source_digest__isnull', True), ('summary_md__isnull', True)), _connector='OR'), name='summary_redaction_shape'),
        ),
    ]
