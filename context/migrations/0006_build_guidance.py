from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("context", "0005_zeroshot_builtins_and_build_config_version"),
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
