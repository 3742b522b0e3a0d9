"""The batches, chains and limiters page's examples (docs/guide/batches-chains-limiters.md), run by
tests/e2e/docs/test_guide_examples.py."""

import cogworker
from cogworker import job, limiter

IMPORTED: list[int] = []


@job(queue="imports", retry=5)
def import_row(shop_id: int, row: int) -> None:
    IMPORTED.append(row)


@job
def import_done(bid: str, shop_id: int) -> None:  # a callback gets the bid, then callback_args
    status = cogworker.batch_status(bid)
    print(f"shop {shop_id}: {status.total - status.failed} rows imported, {status.failed} failed")


def import_shop(shop_id: int, rows: int) -> str:
    with cogworker.batch(f"import shop {shop_id}", on_complete=import_done, callback_args=(shop_id,)) as b:
        for row in range(10):
            import_row.perform_async(shop_id, row)  # every push in the block is a member
        cogworker.push_bulk(import_row, [(shop_id, r) for r in range(10, rows)])
    return b.bid


@job
def fetch(url: str) -> str:
    return f"<html>{url}</html>"


@job(retry=5)
def parse(html: str, strict: bool) -> dict:
    return {"title": html.removeprefix("<html>").removesuffix("</html>"), "strict": strict}


@job(queue="db")
def store(doc: dict) -> None:
    print(f"stored {doc['title']}")


def fetch_parse_store() -> cogworker.Chain | None:
    return cogworker.chain(fetch.s("https://example.com"), parse.s(True), store.s(), pass_results=True)


@job
def resize(path: str, width: int) -> str:
    return f"{path}@{width}"


@job
def publish(paths: list[str]) -> None:
    print(f"published {', '.join(paths)}")


def fetch_resize_publish() -> cogworker.Chain | None:
    return cogworker.chain(
        fetch.s("https://example.com/a.png"),
        cogworker.group(resize.s(320), resize.s(640), resize.s(1280)),  # each gets fetch's result first
        publish.s(),  # gets [r320, r640, r1280]
        pass_results=True,
    )


STRIPE = limiter.concurrent("stripe", 10, lease_s=60)  # at most 10 holders at once, cluster-wide
GITHUB = limiter.window("github", 5000, per=3600)  # 5,000 per clock hour
SMS = limiter.bucket("sms", 20, per=1, burst=40)  # 20 a second on average, bursts of 40


@job(limit=STRIPE)  # passed before the body runs, held around it
def charge(order_id: int) -> None:
    print(f"charged order {order_id}")


@job
def sync_repo(repo: str) -> None:
    with GITHUB:  # inside a job: over the limit, the job is put back for later
        print(f"synced {repo}")
