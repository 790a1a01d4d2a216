"""`rights_version` on projects and sections: bumped under the parent's row lock by every change that may
narrow who reads, writes or owns its stores, and compared by writes under a `FOR KEY SHARE` lock of that row
(docs/access.md "Writes racing a removal"). A constant database default: no table rewrite.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0002_records_write_to_memories_write'),
    ]

    operations = [
        migrations.AddField(
            model_name='project',
            name='rights_version',
            field=models.BigIntegerField(db_default=0, default=0, editable=False),
        ),
        migrations.AddField(
            model_name='section',
            name='rights_version',
            field=models.BigIntegerField(db_default=0, default=0, editable=False),
        ),
    ]
