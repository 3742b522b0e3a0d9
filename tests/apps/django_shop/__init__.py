"""A small Django project for tests/e2e/integrations/test_django.py: one model, cogworker jobs and
Django `@task` functions that write to it. Its database comes from the environment (settings.py)."""
