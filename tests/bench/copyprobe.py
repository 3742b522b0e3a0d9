"""Counts payload-sized copies: which C function made a payload-sized allocation, how often.

The payload curve's heap profile (curves/payload.py). With tracemalloc on, a profile hook on every
thread notes the traced memory when Python calls a C function (orjson.dumps, bytes.decode, hiredis's
pack and reader...) and again when it returns: a call that left at least nine tenths of the payload's
size more allocated made that many payload-sized copies (hiredis's pack_command makes one buffer of
every payload the command carries: a batch of pushes or acknowledgements). Each is named with the
line that called it. Its transient working memory, freed before it returned, is noted apart, as
"<function> (peak x)": the most, in payloads, it had allocated at once (orjson's parser takes about
13 x the text it reads). A call during
which another thread ran (it let go of the GIL: a socket wait, a lock) is not counted: what was
allocated meanwhile was not its own. Calls from C back into Python and on into C are counted at the
innermost call. Only
Python's allocators are traced: a C library's own buffers (hiredis's reader, the kernel's socket
buffers) are not, and neither are copies made by bytecode (a `+` of two strings).

In the worker, jobs_cogworker imports this module when BENCH_COPY_PROBE holds the payload's size in
bytes; each `payload` job then reports the copies counted since the last report (`report`). It slows
every call a great deal: only the profile's few jobs run with it.
"""

from __future__ import annotations

import os
import sys
import threading
import tracemalloc
from collections import Counter
from collections.abc import Callable
from typing import Any

import orjson

COPIES = "bench:copies"  # list of JSON tallies {function: payload-sized allocations}, one per report

_tally: Counter[str] = Counter()
_local = threading.local()
_threshold = 0
_size = 1
_switches = 0  # how often the thread running the hook changed
_last = 0


def _name(func: Any) -> str:
    module = getattr(func, "__module__", None) or type(getattr(func, "__self__", None)).__name__
    return f"{module}.{getattr(func, '__qualname__', repr(func))}"


def _where(frame: Any) -> str:
    """The calling line, and its caller's when the call is in a helper (codec.py, redis-py)."""
    here = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
    outer = frame.f_back
    in_helper = "cogworker" not in frame.f_code.co_filename or "codec" in frame.f_code.co_filename
    if outer is None or not in_helper:
        return here
    return f"{here} < {os.path.basename(outer.f_code.co_filename)}:{outer.f_lineno}"


def _hook(frame: Any, event: str, arg: Any) -> None:
    global _switches, _last
    if getattr(_local, "off", False):
        return
    me = threading.get_ident()
    if me != _last:
        _last = me
        _switches += 1
    if event == "c_call":
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        stack.append((tracemalloc.get_traced_memory()[0], _switches))
        tracemalloc.reset_peak()
    elif event in ("c_return", "c_exception"):
        stack = getattr(_local, "stack", None)
        if not stack:
            return
        start, switches = stack.pop()
        if switches != _switches:
            return  # another thread ran meanwhile (the call let go of the GIL): not this call's
        now, peak = tracemalloc.get_traced_memory()
        name = f"{_name(arg)} ({_where(frame)})"
        if now - start >= _threshold:
            # orjson.dumps reserves about 8 x its output and never touches the rest: one copy.
            _tally[name] += 1 if _name(arg) == "orjson.dumps" else round((now - start) / _size)
        if peak - now >= _threshold:
            _tally[f"{name} (peak x)"] = max(_tally[f"{name} (peak x)"], round((peak - start) / _size))


def install(payload_bytes: int) -> None:
    """Count allocations of at least nine tenths of `payload_bytes` from now on, on every thread."""
    global _threshold, _size
    _size = max(1, payload_bytes)
    _threshold = max(1, int(payload_bytes * 0.9))
    tracemalloc.start()
    sys.setprofile(_hook)
    threading.setprofile(_hook)


def counting(call: Callable[[], object]) -> Counter[str]:
    """Run `call` in this process with the hook on (the push side); what it copied."""
    _tally.clear()
    try:
        call()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        tracemalloc.stop()
    found = Counter(_tally)
    _tally.clear()
    return found


def report(send: Callable[[str, bytes], object]) -> None:
    """Send the tally so far (`send(key, json)`: an RPUSH on the bench Redis) and start a new one."""
    _local.off = True
    try:
        found = dict(_tally)
        _tally.clear()
        send(COPIES, orjson.dumps(found))
    finally:
        _local.off = False


def enabled() -> int:
    return int(os.environ.get("BENCH_COPY_PROBE") or 0)
