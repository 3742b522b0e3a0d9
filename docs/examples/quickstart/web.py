from fastapi import FastAPI

from jobs import send_welcome

app = FastAPI()


@app.post("/signup/{user_id}")
def signup(user_id: int) -> dict[str, str | None]:
    return {"jid": send_welcome.perform_async(user_id)}
