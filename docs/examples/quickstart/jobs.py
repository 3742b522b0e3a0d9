from cogworker import job


@job(retry=5)
def send_welcome(user_id: int) -> None:
    print(f"Welcome, user {user_id}!")
