"""Issue 17: nap's per-level watermarks (memories.models.Watermark), keyed (store_id, id) like every table
of store content (config/distribution.py). A new, empty table: nap fills it as it scans.
"""

import django.db.models.deletion
from django.db import migrations, models

from config.distribution import rekey


class Migration(migrations.Migration):

    dependencies = [
        ('memories', '0006_lean_indexes'),
        ('stores', '0004_distributable'),
    ]

    operations = [
        migrations.CreateModel(
            name='Watermark',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('level', models.SmallIntegerField()),
                ('start', models.BigIntegerField()),
                ('generation', models.BigIntegerField()),
                ('store', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='stores.store')),
            ],
            options={
                'constraints': [models.UniqueConstraint(models.F('store'), models.F('level'), name='watermark_one_per_level'), models.CheckConstraint(condition=models.Q(('level__gte', 1), ('start__gte', 0)), name='watermark_shape')],
            },
        ),
        rekey("memories_watermark", ("store_id", "id")),
    ]
