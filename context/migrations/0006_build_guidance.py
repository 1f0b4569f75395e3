from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("context", "0004_build_reported_usage"),
    ]

    operations = [
        migrations.AddField(
            model_name="contextbuild",
            name="guidance_through",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="contextbuild",
            name="guidance_delivered",
            field=models.BooleanField(default=False),
        ),
    ]
