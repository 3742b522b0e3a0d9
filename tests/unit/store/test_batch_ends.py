"""The sharded layout's batch entries (store/batch_ends.py): an end's entry id is fixed by the member
and its outcome, so a resend overwrites rather than doubles, and the entry carries what the home
count needs and nothing of the payload's body."""

from __future__ import annotations

from cogworker import codec
from cogworker.store import batch_ends, outbox


def test_an_end_entry_is_named_by_its_batch_member_and_outcome() -> None:
    job = {"bid": "b1", "bup": ["b0"], "jid": "j1", "args": ["big"], "class": "m.f", "queue": "q"}
    first, text = batch_ends.end_entry(job, "dead", "E: boom")
    again, _ = batch_ends.end_entry(job, "dead", "E: boom")
    assert first == again == "batch:b1:j1:dead"
    body = codec.loads(text)
    assert body["kind"] == batch_ends.END and body["push"] == []
    assert body["member"] == {"bid": "b1", "bup": ["b0"], "jid": "j1"}
    assert (body["outcome"], body["error"]) == ("dead", "E: boom")
    assert outbox.KINDS[batch_ends.END] == "cogworker.store.batch_ends:apply_end"


def test_a_callbacks_end_is_named_by_its_owner_batch() -> None:
    entry_id, _ = batch_ends.end_entry({"bcb": ["b9", "complete"], "jid": "cb1"}, "ok", "")
    assert entry_id == "batch:b9:cb1:ok"


def test_the_callback_entries_an_apply_moves_cover_every_level() -> None:
    ids = batch_ends.callback_ids({"bid": "b1", "bup": ["b0"], "jid": "j"})
    assert ids == [f"cb:{bid}:{kind}" for bid in ("b1", "b0") for kind in ("success", "complete", "death")]
    assert batch_ends.callback_ids({"bcb": ["b9", "success"], "jid": "j"}) == []
