"""The FastAPI page's app (docs/integrations/fastapi.md): an `async def` endpoint pushing with
`await`, served by uvicorn in tests/e2e/docs/test_aio_examples.py."""

from fastapi import FastAPI
from pydantic import BaseModel

import cogworker
from cogworker.contrib.fastapi import lifespan


@cogworker.job(queue="mailers")
def send_welcome(email: str) -> None:
    print(f"welcome sent to {email}")


class Signup(BaseModel):
    email: str


def create_app() -> FastAPI:
    app = FastAPI(lifespan=lifespan)

    @app.post("/signups")
    async def sign_up(signup: Signup) -> dict[str, str | None]:
        # Awaited on the event loop's own Redis client: the loop serves other requests meanwhile.
        jid = await send_welcome.aio.perform_async(signup.email)
        return {"jid": jid}

    return app
