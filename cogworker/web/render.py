"""Pages from Jinja2 templates, with autoescaping always on: every value from Redis (job classes,
arguments, error messages, queue names, identities) is text in the page, never markup.

Links are built from the mount prefix (the ASGI `root_path`), so the UI works under any path a host
app mounts it at. A time reads relative to the page's drawing ("3 min ago", "in 26 min"), with the
whole ISO-8601 time and its zone on hover: UTC as served, the browser's own zone when the header's
switch says so (static/app.js). Dates are only ever written YYYY-MM-DD.

Every page carries the summary bar (web/summary.py), read here so no page handler has to ask for
it; the error and confirmation pages go without (see `page`).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import time
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
import redis
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from cogworker import codec, formats
from cogworker.web import summary as summary_read
from cogworker.web.state import state_of

ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("cogworker.web", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)

# The live refresh's interval bounds, in seconds. The browser keeps its choice in localStorage, and
# the script clamps whatever it finds there to these: Sidekiq's CVE-2023-26141 was a dashboard
# that polled as fast as a tampered local value said.
LIVE_MIN_S = 2
LIVE_MAX_S = 20
LIVE_DEFAULT_S = 5
FLASH_KEY = "cogworker_flash"
NONE = "\u2013"  # an en dash: the value is unknown or there is none


def prefix(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def route_path(request: Request) -> str:
    """The request's path inside the UI (without the mount prefix)."""
    path, base = request.url.path, prefix(request)
    return (path[len(base) :] or "/") if base and path.startswith(base) else path


def path_to(request: Request, path: str, **query: Any) -> str:
    """The URL of one of the UI's own pages, under the mount prefix, with a query string."""
    params = {k: v for k, v in query.items() if v not in (None, "")}
    return prefix(request) + path + (("?" + urlencode(params, doseq=True)) if params else "")


def segment(value: str) -> str:
    """A value made safe as one path segment (queue names, jids, set entry keys)."""
    return quote(value, safe="")


def relative(delta_s: float) -> str:
    """A time `delta_s` seconds from now as people say it: "in 26 min", "3 min ago", "now"."""
    span = abs(delta_s)
    if span < 1:
        return "now"
    if span < 60:
        text = f"{int(span)} s"
    elif span < 3600:
        text = f"{int(span // 60)} min"
    elif span < 10 * 3600:
        hours, minutes = divmod(int(span // 60), 60)
        text = f"{hours} h {minutes} min" if minutes else f"{hours} h"
    elif span < 48 * 3600:
        text = f"{int(span // 3600)} h"
    else:
        days = int(span // 86400)
        text = f"{days} days"
    return f"in {text}" if delta_s > 0 else f"{text} ago"


def time_tag(epoch: float | None, now: float | None = None, absolute: bool = False) -> Markup:
    """A `<time>` reading relative to now ("3 min ago"; past 60 days, the date), or with
    `absolute` the time itself (YYYY-MM-DD HH:MM:SS, in the zone the page says once); the exact
    UTC time on hover either way. The text is in a `<span>` app.js rewrites for the local zone."""
    if epoch is None or not math.isfinite(epoch):
        return Markup("&ndash;")
    try:
        moment = dt.datetime.fromtimestamp(epoch, dt.UTC)
    except (OverflowError, OSError, ValueError):
        return Markup("&ndash;")
    iso = moment.isoformat(timespec="seconds").replace("+00:00", "Z")
    exact = moment.strftime("%Y-%m-%d %H:%M:%S UTC")
    if absolute:
        text, kind = moment.strftime("%Y-%m-%d %H:%M:%S"), "at"
    else:
        delta = epoch - (time.time() if now is None else now)
        text = relative(delta) if abs(delta) < 60 * 86400 else moment.strftime("%Y-%m-%d")
        kind = "ago"
    return Markup('<time datetime="{}"><span class="{}" title="{}">{}</span></time>').format(
        iso, kind, exact, text
    )


def duration(seconds: float | None) -> str:
    return formats.duration(seconds, NONE)


def size_bytes(value: int | None) -> str:
    return formats.size_bytes(value) if value else NONE


def number(value: int | float | None) -> str:
    return NONE if value is None else f"{value:,}"


def as_json(value: Any, indent: bool = False) -> str:
    """Job data as JSON text (escaped by the template like any other text). Lenient: a payload JSON
    can't hold as it is (a lone surrogate, nesting too deep) is still shown, cleaned."""
    text, _ = codec.dumps_lenient(value)
    if indent:
        text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    return codec.escape(text)


def short(text: str | None, limit: int = 120) -> str:
    if text is None:
        return ""
    text = codec.escape(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def short_id(value: str | None, keep: int = 8) -> Markup:
    """A jid, thread id or identity cut for a table cell, the whole of it on hover (and in the
    page's text for search and copy): `<abbr title="whole">first 8…</abbr>`."""
    if not value:
        return Markup("&ndash;")
    text = codec.escape(str(value))
    if len(text) <= keep + 1:
        return Markup("{}").format(text)
    return Markup('<abbr class="id" title="{}">{}…</abbr>').format(text, text[:keep])


ENV.filters.update(
    time=time_tag,
    duration=duration,
    bytes=size_bytes,
    number=number,
    json=as_json,
    short=short,
    shortid=short_id,
)
ENV.globals.update(segment=segment)


def flash(request: Request, kind: str, text: str) -> None:
    """A message shown at the top of the next page (kind: ok, warn or error)."""
    messages = list(request.session.get(FLASH_KEY, []))
    messages.append([kind, text])
    request.session[FLASH_KEY] = messages[-5:]


def _take_flashes(request: Request) -> list[list[str]]:
    if FLASH_KEY not in request.session:
        return []
    messages: list[list[str]] = request.session.pop(FLASH_KEY)
    return messages


# Pages drawn without the summary bar: the error page (Redis may be what failed, and a second
# attempt would double the wait) and the confirmation page (drawn on the event loop by actions.py,
# where a blocking read would hold every other request).
BARE = frozenset({"error.html", "confirm.html"})


def _summary(request: Request, template: str) -> summary_read.Summary | None:
    if template in BARE:
        return None
    try:
        return summary_read.read(state_of(request).client)
    except redis.RedisError:
        return None  # the page itself says what failed; the bar is left out


def page(request: Request, template: str, title: str, status_code: int = 200, **context: Any) -> Response:
    state = state_of(request)
    html = ENV.get_template(template).render(
        request=request,
        title=title,
        url=lambda path, **query: path_to(request, path, **query),
        static=lambda name: prefix(request) + "/static/" + name,
        can_act=not state.read_only(request),
        flashes=_take_flashes(request),
        live_min=LIVE_MIN_S,
        live_max=LIVE_MAX_S,
        live_default=LIVE_DEFAULT_S,
        nav=NAV,
        current=route_path(request),
        here=request.url.path + (f"?{request.url.query}" if request.url.query else ""),
        prefix=prefix(request),
        summary=_summary(request, template),
        drawn_at=f"{time.time():.3f}",
        **context,
    )
    return HTMLResponse(html, status_code=status_code, headers={"Cache-Control": "no-store"})


NAV = (
    ("/", "Dashboard"),
    ("/busy", "Busy"),
    ("/queues", "Queues"),
    ("/retries", "Retries"),
    ("/scheduled", "Scheduled"),
    ("/dead", "Dead"),
    ("/periodic", "Periodic"),
    ("/batches", "Batches"),
    ("/metrics", "Metrics"),
    ("/actions", "Recent actions"),
)


def back_to(request: Request, given: object, default: str) -> str:
    """Where an action returns: the page it was sent from when that is one of ours (never another
    site: a `back` field is not a redirect anyone may aim), else `default`."""
    base = prefix(request)
    if (
        isinstance(given, str)
        and given.startswith(base + "/")
        and not given.startswith("//")
        and not any(c in given for c in "\\\r\n")
    ):
        return given
    return path_to(request, default)


def redirect(location: str) -> RedirectResponse:
    return RedirectResponse(location, status_code=303)
