"""A FastAPI app for tests/e2e/integrations/test_fastapi.py and docs/integrations/fastapi.md: the
cogworker lifespan, an endpoint that pushes a typed job with the request's body, the Web UI mounted."""

from __future__ import annotations

from fastapi import FastAPI
from pydantic import BaseModel
from typed_jobs import Order, Window, ship

import cogworker.web
from cogworker.contrib.fastapi import lifespan


class Shipment(BaseModel):
    order: Order
    window: Window


def create_app() -> FastAPI:
    app = FastAPI(lifespan=lifespan)

    @app.post("/shipments")
    def create_shipment(shipment: Shipment) -> dict[str, str | None]:
        # A `def` endpoint: FastAPI runs it in its threadpool, so the push's round trip blocks no loop.
        return {"jid": ship.perform_async(shipment.order, shipment.window)}

    app.mount("/jobs", cogworker.web.create_app())
    return app
