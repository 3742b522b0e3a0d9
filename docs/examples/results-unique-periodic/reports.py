"""The results, unique, periodic and status page's examples (docs/guide/results-unique-periodic.md),
run by tests/e2e/docs/test_guide_examples.py."""

from cogworker import job, periodic


@job(result_ttl=3600)  # keep its result an hour (or COGWORKER_RESULT_TTL_S for every job)
def render(report_id: int) -> dict:
    return {"url": f"/reports/{report_id}.pdf", "pages": 12}


@job(result_ttl=3600, retry=False)
def render_broken(report_id: int) -> dict:
    raise ValueError("bad report")


@job(unique="until_executed", unique_for=600)  # a duplicate push returns None until it has run
def rebuild_index(shop_id: int) -> None:
    print(f"rebuilt the index of shop {shop_id}")


@periodic("0 * * * *", tz="Europe/Paris")  # one enqueue per slot across every process and host
@job(queue="maintenance")
def hourly_rollup() -> None:
    print("rolled up the last hour")


@job(status=True)  # or COGWORKER_STATUS_ALL=true for every job
def export(report_id: int) -> None:
    print(f"exported report {report_id}")
