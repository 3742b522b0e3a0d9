"""The one table a run prints, and the JSON file with every raw figure behind it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from systems.base import MANY_PROCESSES as MANY

BASE = "cogworker"
Result = dict[str, Any]


@dataclass(frozen=True)
class Row:
    label: str
    better: str  # "↑" higher is better, "↓" lower is better, "" no direction
    value: Callable[[Result], Any]  # a number, a str shown as is, or None when absent
    fmt: str = "{:,.0f}"


def _get(*path: str) -> Callable[[Result], Any]:
    def read(result: Result) -> Any:
        node: Any = result
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return None
            node = node[key]
        return node

    return read


def _restart(result: Result) -> Any:
    w3 = result.get("w3")
    if not w3:
        return None
    if not w3["killed_jobs"]:
        return "none killed"
    if w3["not_restarted"]:
        return f"> {w3['cap_s']:.0f} s ({w3['not_restarted']}/{len(w3['killed_jobs'])})"
    return w3["max_restart_s"]


def _preload(key: str) -> Callable[[Result], Any]:
    """cogworker's COGWORKER_PRELOAD=true figure; a peer has one memory mode, so its default figure."""

    def read(result: Result) -> Any:
        mode = "preload" if result.get("name") == BASE else "default"
        return _get("memory", mode, key)(result)

    return read


def _variant(name: str, key: str) -> Callable[[Result], Any]:
    """W1 in one of its variants (`pinned`: each worker process on its own CPU; `unpinned`: placed by
    the kernel); a system without that variant, its default figure (its default is that placement)."""

    def read(result: Result) -> Any:
        figure = _get("w1_variants", name, key)(result)
        return figure if figure is not None else _get("w1", key)(result)

    return read


def _many_preload(result: Result) -> Any:
    mode = "preload" if result.get("name") == BASE else "default"
    return _get("memory", f"{mode}-{MANY}", "total_pss_mb")(result)


def _survived(result: Result) -> Any:
    parent = _get("w3", "parent")(result)
    if parent is None:
        return None
    return "yes" if parent["survived"] else f"no (exit {parent['exit_code']})"


def _w4_once(result: Result) -> Any:
    found = [result[key] for key in ("w4", "w4_redis") if result.get(key)]
    if not found:
        return None
    return "yes" if all(w4["exactly_once"] for w4 in found) else "NO"


def _w4_shape(key: str) -> Callable[[Result], Any]:
    def read(result: Result) -> Any:
        w4 = result.get(key)
        if not w4:
            return None
        return f"{w4['processes']} x {w4['peak_per_process']}"

    return read


def _w4_rows(key: str, what: str) -> list[Row]:
    return [
        Row(f"W4 {what}: drain (jobs/s, median)", "↑", _get(key, "jobs_per_s")),
        Row(f"W4 {what}: loop lag p50 (ms)", "↓", _get(key, "lag_p50_ms"), "{:.1f}"),
        Row(f"W4 {what}: loop lag p99 (ms)", "↓", _get(key, "lag_p99_ms"), "{:.1f}"),
        Row(f"W4 {what}: loop lag max (ms)", "↓", _get(key, "lag_max_ms"), "{:.1f}"),
        Row(f"W4 {what}: workers CPU/job (µs)", "↓", _get(key, "workers_cpu_us_per_job")),
        Row(f"W4 {what}: Redis CPU/job (µs)", "↓", _get(key, "redis_cpu_us_per_job"), "{:.1f}"),
        Row(f"W4 {what}: Redis commands/job", "↓", _get(key, "commands_per_job"), "{:.2f}"),
        Row(f"W4 {what}: processes x peak at once", "", _w4_shape(key)),
    ]


ROWS = [
    Row("enqueue, single pushes (jobs/s)", "↑", _get("enqueue", "single_jobs_per_s")),
    Row("enqueue, bulk (jobs/s)", "↑", _get("enqueue", "bulk_jobs_per_s")),
    Row("W1 drain (jobs/s, median)", "↑", _get("w1", "jobs_per_s")),
    Row("W1 jobs per run", "", _get("w1", "jobs")),
    Row("W1 start-up to first job done (s)", "↓", _get("w1", "startup_s"), "{:.2f}"),
    Row("Redis commands per job", "↓", _get("w1", "commands_per_job"), "{:.2f}"),
    Row("  of which script calls", "↓", _get("w1", "script_calls_per_job"), "{:.2f}"),
    Row("W1 CPU used, first to last job (%)", "↑", _get("w1", "cpu_used_pct"), "{:.0f}"),
    Row("W1 CPU used under a backlog, 10-90 % done (%)", "↑", _get("w1", "cpu_backlog_pct"), "{:.0f}"),
    Row("W1 drain, pinned to CPUs (jobs/s) ³", "↑", _variant("pinned", "jobs_per_s")),
    Row("W1 CPU used, pinned to CPUs (%) ³", "↑", _variant("pinned", "cpu_used_pct"), "{:.0f}"),
    Row("W1 drain, not pinned (jobs/s) ⁴", "↑", _variant("unpinned", "jobs_per_s")),
    Row("W1 CPU used, not pinned (%) ⁴", "↑", _variant("unpinned", "cpu_used_pct"), "{:.0f}"),
    Row("W1 CPU/job from launch: workers (µs)", "↓", _get("w1", "cpu_us_per_job", "workers")),
    Row("  supervisor/parent + fork server (µs)", "↓", _get("w1", "cpu_us_per_job", "supervisor"), "{:.1f}"),
    Row("  Redis (µs)", "↓", _get("w1", "cpu_us_per_job", "redis"), "{:.1f}"),
    Row("W2 pickup p50 (ms)", "↓", _get("w2", "p50_ms"), "{:.1f}"),
    Row("W2 pickup p90 (ms)", "↓", _get("w2", "p90_ms"), "{:.1f}"),
    Row("W2 pickup p99 (ms)", "↓", _get("w2", "p99_ms"), "{:.1f}"),
    Row("W2 pickup max (ms)", "↓", _get("w2", "max_ms"), "{:.1f}"),
    Row("W3 jobs on the killed worker", "", lambda r: len(r["w3"]["killed_jobs"]) if r.get("w3") else None),
    Row("W3 killed jobs started again after (s)", "↓", _restart, "{:.2f}"),
    Row("W3 jobs lost (never done by the cap)", "↓", _get("w3", "lost")),
    Row("W3 jobs run twice", "", _get("w3", "ran_twice")),
    Row("W3 worker command survived the kill", "", _survived),
    Row("parent RSS (MB)", "↓", _get("memory", "default", "parent_rss_mb"), "{:.1f}"),
    Row("parent PSS (MB)", "↓", _get("memory", "default", "parent_pss_mb"), "{:.1f}"),
    Row("helper process RSS (MB) ²", "↓", _get("memory", "default", "helpers_rss_mb"), "{:.1f}"),
    Row("helper process PSS (MB) ²", "↓", _get("memory", "default", "helpers_pss_mb"), "{:.1f}"),
    Row("child USS (MB, mean)", "↓", _get("memory", "default", "child_uss_mb_mean"), "{:.1f}"),
    Row("child PSS (MB, mean)", "↓", _get("memory", "default", "child_pss_mb_mean"), "{:.1f}"),
    Row("total PSS (MB)", "↓", _get("memory", "default", "total_pss_mb"), "{:.1f}"),
    Row("child USS, cogworker preload (MB) ¹", "↓", _preload("child_uss_mb_mean"), "{:.1f}"),
    Row("child PSS, cogworker preload (MB) ¹", "↓", _preload("child_pss_mb_mean"), "{:.1f}"),
    Row("total PSS, cogworker preload (MB) ¹", "↓", _preload("total_pss_mb"), "{:.1f}"),
    Row(
        f"{MANY} procs: child USS (MB, mean)",
        "↓",
        _get("memory", f"default-{MANY}", "child_uss_mb_mean"),
        "{:.1f}",
    ),
    Row(f"{MANY} procs: total PSS (MB)", "↓", _get("memory", f"default-{MANY}", "total_pss_mb"), "{:.1f}"),
    Row(f"{MANY} procs: total PSS, preload (MB) ¹", "↓", _many_preload, "{:.1f}"),
    Row("idle parent CPU (%)", "↓", _get("idle", "parent_cpu_pct"), "{:.2f}"),
    Row("idle workers CPU (%, all)", "↓", _get("idle", "children_cpu_pct"), "{:.2f}"),
    Row("idle Redis commands/s per worker", "↓", _get("idle", "redis_commands_per_s_per_child"), "{:.1f}"),
    Row("rolling restart: took (s)", "↓", _get("restart", "restart_took_s"), "{:.2f}"),
    Row("  each slot without jobs, max (s)", "↓", _get("restart", "max_slot_unavailable_s"), "{:.3f}"),
    Row("  no job started anywhere, max (s)", "↓", _get("restart", "max_pickup_gap_s"), "{:.3f}"),
    Row("  jobs lost", "↓", _get("restart", "lost")),
    *_w4_rows("w4", "sleep 5 ms"),
    *_w4_rows("w4_redis", "async INCR"),
    Row("W4 start-up to first job done (s)", "↓", _get("w4", "startup_s"), "{:.2f}"),
    Row("W4 every job ran exactly once", "", _w4_once),
]


def _cell(row: Row, value: Any, result: Result) -> str:
    if value is None:
        return "not run" if result.get("not_runnable") else "—"
    if isinstance(value, str):
        return value
    return row.fmt.format(value)


def _ratio(base: Any, peer: Any) -> str:
    if not isinstance(base, int | float) or not isinstance(peer, int | float) or not peer:
        return "—"
    return f"{base / peer:.2f}x"


VALUE_WIDTH = 14
# The ratio column's short name for a peer whose first four letters would not tell it apart.
RATIO_NAMES = {"sidekiq-yjit": "skYJ", "sidekiq": "sk"}
RATIO_WIDTH = 9


def table(results: dict[str, Result]) -> str:
    names = list(results)
    peers = [n for n in names if n != BASE]
    has_base = BASE in names
    header = ["metric"]
    widths: list[int] = []
    if has_base:
        header.append(BASE)
        widths.append(VALUE_WIDTH)
    for peer in peers:
        header.append(peer)
        widths.append(VALUE_WIDTH)
        if has_base:
            header.append(f"cog/{RATIO_NAMES.get(peer, peer[:4])}")
            widths.append(RATIO_WIDTH)
    lines = [_line(header, widths)]
    lines.append("-" * len(lines[0]))
    for row in ROWS:
        values = {n: row.value(results[n]) for n in names}
        if all(v is None for v in values.values()):
            continue
        cells = [f"{row.label} {row.better}".rstrip()]
        if has_base:
            cells.append(_cell(row, values[BASE], results[BASE]))
        for peer in peers:
            cells.append(_cell(row, values[peer], results[peer]))
            if has_base:
                cells.append(_ratio(values[BASE], values[peer]) if row.better else "")
        lines.append(_line(cells, widths))
    return "\n".join(lines)


def _line(cells: list[str], widths: list[int]) -> str:
    return f"{cells[0]:<40}" + "".join(f"{c:>{w}}" for c, w in zip(cells[1:], widths, strict=True))


def footnotes(results: dict[str, Result], plan: dict[str, Any]) -> list[str]:
    notes = ["ratio = cogworker / peer; ↑ higher is better, ↓ lower is better."]
    if any(r.get(step) for r in results.values() for step in ("enqueue", "w1", "w2", "w3", "memory")):
        notes += _sync_notes(plan)
    if any(r.get("restart") for r in results.values()):
        notes.append(
            "rolling restart: SIGHUP to the worker command under a job every 5 ms; a slot is a worker "
            "process and its replacement (without jobs from the old one's last start to the new one's "
            "first); 'no job started anywhere' is the longest pause in job starts across all slots."
        )
    notes += _w4_notes(results, plan)
    for name, result in results.items():
        notes += [
            f"{name}: {note}" if not note.startswith(name) else note for note in result.get("notes", [])
        ]
        if result.get("enqueue"):
            notes.append(f"{name} bulk push: {result['enqueue']['bulk_method']}")
        if result.get("w1") and result["w1"]["jobs"] != plan["w1_jobs"]:
            notes.append(f"{name} drained {result['w1']['jobs']:,} jobs per W1 run: fewer, as it is slower.")
        parent = _get("w3", "parent")(result)
        if parent and not parent["survived"]:
            notes.append(
                f"{name} W3: the worker command exited {parent['exit_after_s']:.1f} s after the kill; "
                "the harness started it again, as systemd's Restart=on-failure would."
            )
        if result.get("not_runnable"):
            notes.append(result["not_runnable"])
        for step, error in result.get("errors", {}).items():
            notes.append(f"{name} {step} failed: {error}")
        for problem in result.get("w4_problems", []):
            notes.append(f"{name} W4 check failed: {problem}")
        if result.get("w4_shortfall"):
            notes.append(f"{name} W4: {result['w4_shortfall']}")
    return notes


def _sync_notes(plan: dict[str, Any]) -> list[str]:
    return [
        "W1 drain = (jobs - 1) / (last job done - first job done), timed by the jobs; start-up apart.",
        f"W1 runs: {plan['w1_runs']}, in rounds (each drains once per system, so a drift in the "
        f"machine's speed falls on all alike); W2: {plan['w2_jobs']} jobs "
        f"{plan['w2_gap_s'] * 1000:.0f} ms apart to idle workers; W3: {plan['w3_jobs']} jobs of "
        f"{plan['w3_job_s']:.0f} s, one worker "
        f"SIGKILLed mid-job, watched {plan['w3_cap_s']:.0f} s; idle window {plan['idle_s']:.0f} s.",
        "Redis commands per job: INFO commandstats over a W1 drain, start-up included; commands run "
        "inside scripts count under their own names too; the jobs' reporting and the harness's polls "
        "are taken out.",
        "W3 '> N s (k/m)': k of the m jobs on the killed worker had not started again N s after the kill.",
        "Processes: Redis and every worker command in the harness's session (--one-session)."
        if plan.get("one_session")
        else "Processes: Redis and each worker command in a session of its own.",
        "¹ peers have one memory mode; their preload rows repeat their default figure.",
        "² a direct child of the worker command that runs no jobs: cogworker's fork server, which "
        "holds the loaded code its workers are forked from; in total PSS, and its CPU in idle parent "
        "CPU. Peers have none (0).",
        "³ each worker process and its threads on a CPU of its own, drained in the same rounds right "
        "after the default: cogworker with COGWORKER_CPU_AFFINITY=spread (what its default, auto, does "
        "with one worker per CPU), Sidekiq's processes each started under taskset (multiproc.py; it has "
        "no setting); Dramatiq forks its own workers and is not pinned: its rows repeat its default figure.",
        "⁴ every worker process placed by the kernel: cogworker with COGWORKER_CPU_AFFINITY=none, drained "
        "in the same rounds; the peers' default is this placement: their rows repeat their default figure.",
    ]


def _w4_notes(results: dict[str, Result], plan: dict[str, Any]) -> list[str]:
    ran = {name: r for name, r in results.items() if r.get("w4")}
    if not ran:
        return []
    notes = [
        f"W4: {plan['w4_jobs']:,} `async def` jobs pushed before the workers start; 2 worker processes x "
        f"500 jobs at once for every system; median of {plan['w4_runs']} run(s), in rounds across the "
        "systems; rate as W1's. 'sleep 5 ms': each job awaits asyncio.sleep(0.005) (at most 200,000 "
        "jobs/s); 'async INCR': each makes one real round trip instead, an INCR on the bench Redis "
        "through its process's redis.asyncio client. 'processes x peak' = processes that ran jobs x the "
        "fewest jobs any of them had in their body at once at its peak.",
        "W4 loop lag: per job, how late a timer it set woke (sleep 5 ms: its own sleep; async INCR: a "
        "sleep(0) just before the INCR), measured inside the job the same way for every system. CPU/job: "
        "the worker processes from launch to the last job, and Redis over the same window; commands/job "
        "leave out the jobs' reporting (a pipelined INCR, 2 HINCRBY, RPUSH) and the body's INCR.",
    ]
    notes += [f"W4 config, {r['w4']['config']}" for r in ran.values()]
    for key, what in (("w4", "sleep 5 ms"), ("w4_redis", "async INCR")):
        figures = {name: r[key] for name, r in ran.items() if r.get(key)}
        peers = {name: w4["jobs_per_s"] for name, w4 in figures.items() if name != BASE}
        if BASE in figures and peers:
            best = max(peers, key=lambda n: peers[n])
            ratio = figures[BASE]["jobs_per_s"] / peers[best]
            notes.append(
                f"W4 {what}: cogworker / best peer ({best}): {ratio:.2f}x (target >= 1.5x); cogworker "
                f"loop lag p99 {figures[BASE]['lag_p99_ms']:.1f} ms (target <= 10 ms)."
            )
    return notes


def write_json(directory: Path, stamp: str, document: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"bench-{stamp}.json"
    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    return path


# The Web UI section (web_pages.py): one row per page, the big fill's times, every fill's commands.
WEB_WIDTHS = [10, 10, 14, 11, 11, 11, 7, 11, 8]


def _count(page: Result, key: str = "commands_per_page") -> str:
    if key not in page:
        return "—"
    return f"{page[key]:.2f}".rstrip("0").rstrip(".")


def _web_row(label: str, web: Result) -> list[str]:
    pages = [fill["pages"][label] for fill in web["fills"].values()]
    big = pages[0]
    blank = [""] * (len(WEB_WIDTHS) - 1)
    if big.get("not_built"):
        return [label, "not built", *blank]
    if label in web["failed"]:
        return [label, "FAILED", *blank]
    same = web["same"][label]
    return [
        label,
        f"{big['median_ms']:.1f}",
        f"{big['p99_ms']:.1f}",
        "PASS" if big["p99_ms"] <= web["target_p99_ms"] else "FAIL",
        *(_count(page) for page in pages),
        _count(big, "sent_per_page"),
        _count(big, "in_scripts_per_page"),
        same,
    ]


def web_table(web: Result) -> str:
    labels = list(web["fills"])
    big = web["fills"][labels[0]]
    target, repeats, fill = web["target_p99_ms"], web["repeats"], big["fill"]
    header = ["page", "median ms", "p99 ms", f"p99 ≤ {target:g} ms", *(f"cmds {n}" for n in labels)]
    header += ["sent", "in scripts", "same"]
    lines = [f"Web UI pages (target: every page p99 ≤ {target:g} ms)", "", _line(header, WEB_WIDTHS)]
    lines.append("-" * len(lines[-1]))
    lines += [_line(_web_row(label, web), WEB_WIDTHS) for label in big["pages"]]
    lines += [
        "",
        f"  fill {labels[0]}: {fill['set_size']:,} entries in each of dead, retry and scheduled; "
        f"{fill['queues']} queues of {fill['jobs_per_queue']} jobs and one of {fill['big_queue']:,}; "
        f"{fill['processes']} live processes running {fill['running_per_process']} jobs each; "
        f"{fill['periodic']} periodic entries; {fill['days']} days of counters "
        f"(seeded in {big['seed_s']:.1f} s, {big['used_memory']}).",
        "  fills "
        + ", ".join(labels[1:])
        + ": the same with that many per set and in the big queue; only the first is shown timed "
        f"(fill {labels[-1]}'s times are in the JSON; the middle fill is counted, not timed).",
        f"  times: the app in-process (create_app) through httpx2's ASGI transport, "
        f"{repeats['repeats']} requests per page after {repeats['warmups']} warm-ups "
        f"(fewer when a page passed {repeats['cap_s']:g} s: see 'repeats' in the JSON); "
        f"1-minute load average {web['load_before']:.2f} before, {web['load_after']:.2f} after.",
        "  cmds: every command Redis ran per page (INFO commandstats over the repeats / repeats), a "
        "script's inner commands included (Redis counts them under their own names), the page's own "
        "INFO included, the counter's own INFO taken out. Of the first fill's: sent = the commands the "
        "app's client sent (a script call counts one), in scripts = the rest, run inside scripts.",
        f"  same: 'yes' when a page sends as many commands on every fill; 'GROWS' when it sends more on "
        f"{labels[0]} than on {labels[1]}; 'capped' when more on {labels[0]} than on {labels[-1]} but as "
        f"many as on {labels[1]} (it grows up to a bound, then stops); 'varies' for any other difference "
        "(fewer on a bigger fill: a time budget). 'not built': no route takes the path yet (it 404s).",
    ]
    for label, page in big["pages"].items():
        if page.get("script_ms_per_page", 0) >= 1:
            calls = page["script_calls_per_page"]
            lines.append(
                f"  {label}: scripts ran {page['script_ms_per_page']:.1f} ms per page on the {labels[0]} "
                f"fill, in {_count(page, 'script_calls_per_page')} calls of "
                f"{page['script_ms_per_page'] / calls:.1f} ms on average (Redis serves no other client "
                "during a call)."
            )
    for label in web["failed"]:
        why = next(
            f["pages"][label]["failed"] for f in web["fills"].values() if f["pages"][label].get("failed")
        )
        lines.append(f"  FAILED {label}: {why}")
    return "\n".join(lines)
