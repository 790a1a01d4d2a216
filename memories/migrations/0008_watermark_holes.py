"""Issue 17: a watermark lists up to 16 runs of missing ranges below its start (memories.models.Watermark),
so nap's scan skips a level's live summaries after a forget or redaction near the start of a large store.
Existing rows (no holes) keep their meaning: every range before `start` is live.
"""

import django.contrib.postgres.fields
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('memories', '0007_watermark'),
        ('stores', '0005_store_deleted_at'),
    ]

    operations = [
        migrations.AddField(
            model_name='watermark',
            name='hole_ends',
            field=django.contrib.postgres.fields.ArrayField(base_field=models.BigIntegerField(), default=list, size=None),
        ),
        migrations.AddField(
            model_name='watermark',
            name='hole_starts',
            field=django.contrib.postgres.fields.ArrayField(base_field=models.BigIntegerField(), default=list, size=None),
        ),
        migrations.AddConstraint(
            model_name='watermark',
            constraint=models.CheckConstraint(condition=models.Q(('hole_starts__len', models.F('hole_ends__len')), ('hole_starts__len__lte', 16)), name='watermark_holes'),
        ),
    ]
