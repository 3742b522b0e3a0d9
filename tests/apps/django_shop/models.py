from __future__ import annotations

from django.db import models


class Order(models.Model):
    note = models.CharField(max_length=100)
    shipped = models.BooleanField(default=False)
    # The database session (PostgreSQL's backend pid) the job that shipped it used.
    shipped_by_session = models.IntegerField(null=True)

    class Meta:
        app_label = "django_shop"
