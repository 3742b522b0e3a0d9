"""The Django app (`"cogworker.contrib.django"` in INSTALLED_APPS): when Django starts, the job API
takes its settings from `settings.COGWORKER` (conf.py), each installed app's `jobs` module is imported
(discovery.py; `"AUTODISCOVER": False` turns it off), and with `"TRANSACTION_AWARE": True` pushes
inside an atomic block wait for the commit (transaction.py)."""

from __future__ import annotations

from django.apps import AppConfig


class CogworkerConfig(AppConfig):  # type: ignore[misc]
    name = "cogworker.contrib.django"
    label = "cogworker"
    verbose_name = "cogworker"

    def ready(self) -> None:
        from cogworker.api import client
        from cogworker.contrib.django import conf, discovery, transaction

        client.configure(conf.load_settings())
        transaction.use_transaction_aware(conf.transaction_aware())
        if conf.autodiscover():
            discovery.autodiscover()
