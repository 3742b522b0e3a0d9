"""`cogworker run`'s own short path (cli/run_fast.py): it takes the same command lines as the full
command line, and refuses a bad one with the same exit codes and words, before any settings check or
worker import."""

from __future__ import annotations

from pathlib import Path

import pytest

from cogworker import exitcodes
from cogworker.cli import run_fast


@pytest.mark.parametrize(
    ("argv", "recognised"),
    [
        (["run"], True),
        (["run", "-c", "4"], True),
        (["--env-file", "/etc/app.env", "run"], True),
        (["--env-file=/etc/app.env", "run", "-Q", "mail"], True),
        (["--env-file", "/etc/app.env", "status"], False),
        (["--env-file"], False),
        (["status"], False),
        ([], False),
    ],
)
def test_only_a_run_command_line_takes_the_short_path(argv: list[str], recognised: bool) -> None:
    assert run_fast.recognise(argv) is recognised


def test_an_unknown_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_fast.main(["run", "--no-such-option"]) == exitcodes.USAGE
    assert "--no-such-option" in capsys.readouterr().err


def test_an_env_file_that_cannot_be_read_is_a_configuration_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "absent.env"
    assert run_fast.main(["--env-file", str(missing), "run"]) == exitcodes.CONFIG_ERROR
    err = capsys.readouterr().err
    assert "configuration error" in err and str(missing) in err


def test_queue_options_that_disagree_together_are_a_usage_error_naming_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Each part parses alone; only together do they mix a weighted queue with an unweighted one.
    assert run_fast.main(["run", "-Q", "mail:2", "-Q", "reports"]) == exitcodes.USAGE
    assert "-Q/--queues mail:2,reports" in capsys.readouterr().err
