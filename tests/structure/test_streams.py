"""`make test`'s streams (tests/run_streams.py): every folder a stream names exists and is named once,
and the last stream runs every other test folder, so no test is left out or run twice."""

from __future__ import annotations

from pathlib import Path

from tests.run_streams import STREAMS, commands

TESTS = Path(__file__).resolve().parent.parent


def test_each_named_folder_exists_and_is_named_once() -> None:
    named = [folder for stream in STREAMS for folder in stream]
    assert len(named) == len(set(named))
    assert all((TESTS / folder).is_dir() for folder in named)


def test_the_last_stream_takes_every_folder_the_others_do_not() -> None:
    *named_streams, last = commands()
    paths = [arg for argv in named_streams for arg in argv if arg.startswith("tests/")]
    assert last[-1 - len(paths) :] == ["tests", *(f"--ignore={p}" for p in paths)]
    # Together they cover every test folder exactly once: each named path is ignored by the last.
    assert {p.removeprefix("tests/") for p in paths} == {f for s in STREAMS for f in s}
