import logging

from cogworker import job

log = logging.getLogger(__name__)


@job(retry=5)
def send_welcome(user_id: int) -> None:
    log.info("Welcome, user %s!", user_id)
