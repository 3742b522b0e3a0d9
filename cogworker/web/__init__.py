"""The Web UI: an ASGI application over the same operations (cogworker/ops/) the CLI uses.

Mount it in your own Starlette/FastAPI app under any prefix, or serve it alone with `cogworker web`:

    app.mount("/jobs", cogworker.web.create_app(settings))

Needs the `web` extra (`pip install 'cogworker-redis[web]'`).
"""

from __future__ import annotations

from cogworker.web.app import create_app

__all__ = ["create_app"]
