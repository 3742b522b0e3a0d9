"""What every page and action shares: the settings, one Redis client, the scripts, the read-only rule.

The app's middleware puts it in the ASGI scope (`cogworker.web`), so a handler finds its own app's
state even when mounted inside a host app whose `request.app` is the host.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import redis
from starlette.requests import Request

from cogworker.settings import Settings
from cogworker.store.lazy_client import LazyClient
from cogworker.store.scripts import Scripts

SCOPE_KEY = "cogworker.web"

ReadOnlyRule = Callable[[Request], bool]
# The host's answer to "who is this?" for the audit trail (web/audit.py), when its user isn't
# Starlette's `request.user`; None or "" falls through to the other sources.
UserOf = Callable[[Request], str | None]


@dataclass
class WebState:
    settings: Settings
    # The host's per-request rule (e.g. "only admins act"); COGWORKER_WEB_READ_ONLY=true wins over it.
    read_only_rule: ReadOnlyRule | None = None
    user_of: UserOf | None = None
    # Built on first use, not in create_app: mounting the UI must not need Redis to be up.
    lazy: LazyClient = field(init=False)

    def __post_init__(self) -> None:
        self.lazy = LazyClient(self.settings)

    @property
    def client(self) -> redis.Redis:
        return self.lazy.client

    @property
    def scripts(self) -> Scripts:
        return self.lazy.scripts

    def read_only(self, request: Request) -> bool:
        if self.settings.web_read_only:
            return True
        return bool(self.read_only_rule(request)) if self.read_only_rule is not None else False

    def close(self) -> None:
        self.lazy.close()


def state_of(request: Request) -> WebState:
    state: WebState = request.scope[SCOPE_KEY]
    return state
