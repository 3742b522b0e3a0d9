"""What every verb shares: the Redis connection, `--json` output, confirmations, number formats."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import orjson
import redis

from cogworker import codec, exitcodes
from cogworker.cli.import_path import cwd_first_on_path as cwd_first_on_path
from cogworker.settings import Settings
from cogworker.store.lazy_client import LazyClient
from cogworker.store.scripts import Scripts


class Failure(Exception):
    """Ends the command with one line on stderr and an exit code."""

    def __init__(self, message: str, code: int = exitcodes.FAILURE) -> None:
        super().__init__(message)
        self.code = code


class Context:
    """One command's settings, Redis client and output streams."""

    def __init__(self, settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
        self.settings = settings
        self.args = args
        self.json: bool = bool(getattr(args, "json", False))
        self.out = out
        self.err = err
        self._redis = LazyClient(settings)

    @property
    def client(self) -> redis.Redis:
        return self._redis.client

    @property
    def scripts(self) -> Scripts:
        return self._redis.scripts

    def close(self) -> None:
        self._redis.close()

    def print(self, line: str = "") -> None:
        # Text read from Redis may hold bytes that weren't UTF-8 (cogworker/codec.py): shown escaped, since
        # writing a lone surrogate to a UTF-8 stream raises.
        print(codec.escape(line), file=self.out)

    def warn(self, line: str) -> None:
        print(f"cogworker: warning: {codec.escape(line)}", file=self.err)

    def emit(self, data: Any, text: Callable[[Any], Sequence[str]]) -> None:
        """`data` as JSON with --json, else the lines `text(data)` makes of the same data."""
        if self.json:
            self.out.write(pretty_json(to_plain(data)) + "\n")
        else:
            for line in text(data):
                self.print(line)

    def confirm(self, question: str) -> None:
        """Ask before something that can't be undone. `--yes` skips the question; without a
        terminal to ask on, and without --yes, the command refuses (a script must say --yes)."""
        if getattr(self.args, "yes", False):
            return
        stdin = sys.stdin
        if stdin is None or not stdin.isatty():
            raise Failure(f"{question} Refusing without a terminal to ask on: pass --yes", exitcodes.USAGE)
        self.err.write(f"{question} [y/N] ")
        self.err.flush()
        answer = stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            raise Failure("aborted, nothing changed")


def pretty_json(value: Any, *, sort_keys: bool = False) -> str:
    """Indented JSON of anything read from Redis: strings that weren't UTF-8 escaped, nesting
    deeper than JSON output allows shown as its repr (codec.sanitise), never an exception."""
    option = orjson.OPT_INDENT_2 | (orjson.OPT_SORT_KEYS if sort_keys else 0)
    try:
        return orjson.dumps(value, option=option).decode()
    except codec.EncodeError:
        return orjson.dumps(codec.sanitise(value, []), option=option).decode()


def to_plain(data: Any) -> Any:
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        return {f.name: to_plain(getattr(data, f.name)) for f in dataclasses.fields(data)}
    if isinstance(data, dict):
        return {str(k): to_plain(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [to_plain(v) for v in data]
    return data


def json_flag() -> argparse.ArgumentParser:
    """A parent parser giving a verb `--json`."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--json", action="store_true", help="print JSON (the same data as the text)")
    return parent


def yes_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-y", "--yes", action="store_true", help="don't ask for confirmation")


def timestamp(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """Left-aligned columns, two spaces apart."""
    # Escaped before measuring: a name that isn't UTF-8 prints wider than it is long.
    cells = [[str(h) for h in headers]] + [[codec.escape(str(c)) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]


def short(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else codec.dumps_lenient(value)[0]
    return text if len(text) <= width else text[: width - 1] + "…"
