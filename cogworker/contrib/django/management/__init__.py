"""Django management commands of the cogworker app: `python manage.py cogworker ...`."""
