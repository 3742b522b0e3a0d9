"""The Flask example of docs/integrations/flask.md, as tests/e2e/integrations/test_flask.py runs it:
an app factory that configures cogworker from the app's config, and a view that pushes a job.

A worker runs the jobs (jobs.py) with `FLASK_APP=flask_shop` and
`COGWORKER_REQUIRE=cogworker.contrib.flask.worker,flask_shop.jobs`: Flask's discovery calls
`create_app()`. The tests pass the config of their private Redis to the factory.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, request

from cogworker.contrib import flask as cogworker_flask
from flask_shop.jobs import send_receipt


def create_app(**config: Any) -> Flask:
    app = Flask(__name__)
    app.config.update(
        COGWORKER_REDIS_URL="redis://localhost:6379/0",  # COGWORKER_REDIS_URL in the environment wins
        SHOP_NAME="the corner shop",
    )
    app.config.update(config)
    cogworker_flask.init_app(app)

    @app.post("/orders/<int:order_id>")
    def place_order(order_id: int) -> dict[str, str | None]:
        jid = send_receipt.perform_async(order_id, request.args.get("to", "customer"))
        return {"jid": jid}

    return app
