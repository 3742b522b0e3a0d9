"""A worker for a Flask app built by a factory: list this module first in COGWORKER_REQUIRE, before
the app's job modules (`COGWORKER_REQUIRE=cogworker.contrib.flask.worker,shop.jobs`), with FLASK_APP
in the worker's environment.

Importing it loads the app as `flask run` does (Flask's own discovery: `FLASK_APP=shop` finds an
`app` in shop or calls its `create_app()`; `shop:create_app("worker")` passes arguments; the module
is found from the current directory), so the factory's `init_app(app)` runs in the worker; a factory
that didn't call it has it called here. It then refuses to boot when `app.config` disagrees with the
worker's own COGWORKER_* environment, which is all a worker reads for itself: a worker must not
serve another Redis than the app pushes to.

An app created at import time needs none of this: name its module in COGWORKER_REQUIRE.
"""

from __future__ import annotations

import os

from flask.cli import ScriptInfo

from cogworker.contrib import flask as flask_integration
from cogworker.settings import ConfigError, load_settings

# set_debug_flag=False: loading the app must not change FLASK_DEBUG for the worker's process.
_loaded = ScriptInfo(app_import_path=os.environ.get("FLASK_APP"), set_debug_flag=False).load_app()
if flask_integration.app() is not _loaded:
    flask_integration.init_app(_loaded)

_differ = flask_integration.disagreements(_loaded, load_settings())
if _differ:
    raise ConfigError(
        f"the Flask app's config sets {', '.join(_differ)} to another value than this worker's "
        "environment, which is all a worker reads: set the same in its environment (env file)"
    )
