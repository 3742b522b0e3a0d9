"""What a typical app's job module imports before its jobs are defined, for the start-up curve's
"typical stack" apps (curves/startup.py): the same modules in every Python system's app, so each pays
the same, and the difference left is the system's own start-up.

A web service's workers: settings and models (pydantic), an HTTP client (httpx2), templates
(jinja2), dates (dateutil), a database driver of the standard library (sqlite3), and the usual
standard modules.
"""

from __future__ import annotations

import decimal  # noqa: F401
import email.message  # noqa: F401
import logging.handlers  # noqa: F401
import sqlite3  # noqa: F401
import uuid  # noqa: F401
import zoneinfo  # noqa: F401

import dateutil.parser  # noqa: F401
import httpx2  # noqa: F401
import jinja2  # noqa: F401
import pydantic  # noqa: F401
