"""The Groups view of the retry and dead sets (`/retries/groups`, `/dead/groups`): one row per job
class and error class (ops/set_groups.py), with a link to its entries and Retry / Delete / Kill for
the whole group. Those buttons post to the listing's bulk actions (set_actions_web.py `every`) with
the group's exact filter, so they take the same confirmation page and the same atomic steps.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker.ops import set_groups
from cogworker.web.render import page
from cogworker.web.set_actions_web import KILLABLE, SET_PATHS
from cogworker.web.state import state_of

GROUPED = ("retry", "dead")
TITLES = {"retry": "Retries by failure", "dead": "Dead jobs by failure"}
# Counting reads the whole set: a longer budget than a filtered listing's, still a bounded page.
COUNT_BUDGET_S = 1.0


def _groups(request: Request, set_name: str) -> Response:
    grouping = set_groups.groups(state_of(request).client, set_name, COUNT_BUDGET_S)
    return page(
        request,
        "set_groups.html",
        TITLES[set_name],
        set_name=set_name,
        path=SET_PATHS[set_name],
        grouping=grouping,
        budget_s=COUNT_BUDGET_S,
        killable=set_name in KILLABLE,
    )


def _endpoint(set_name: str) -> Callable[[Request], Response]:
    def endpoint(request: Request) -> Response:
        return _groups(request, set_name)

    endpoint.__name__ = f"groups_{set_name}"
    return endpoint


def routes_for(set_name: str) -> list[BaseRoute]:
    if set_name not in GROUPED:
        return []
    return [Route(SET_PATHS[set_name] + "/groups", _endpoint(set_name), methods=["GET"])]
