"""`cogworker run`'s options: each is a setting that wins over the environment, and a bad one is a
usage error (exit 2) naming the option. The worker itself is run by tests/e2e/cli/."""

from __future__ import annotations

import argparse

import pytest

from cogworker.cli import run
from cogworker.cli.main import build_parser, main
from cogworker.settings import load_settings
from tests.support.daemon_env import use_only


def parsed(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", *argv])


def test_the_options_are_the_settings_and_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    use_only(
        monkeypatch,
        {
            "COGWORKER_REQUIRE": "from_env",
            "COGWORKER_QUEUES": "env_q",
            "COGWORKER_CONCURRENCY": "7",
            "COGWORKER_LOG_LEVEL": "warning",
            "COGWORKER_TIMEOUT_S": "12",
        },
    )
    args = parsed(
        "myapp",
        "other.jobs,third",
        "-Q",
        "critical:3,default:1",
        "-c",
        "3",
        "--redis-url",
        "redis://example:6390/2",
        "--log-level",
        "debug",
    )
    given = run.overrides(args)
    assert given == {
        "require": "myapp,other.jobs,third",
        "queues": "critical:3,default:1",
        "concurrency": 3,
        "redis_url": "redis://example:6390/2",
        "log_level": "debug",
    }
    settings = load_settings(**given)
    assert settings.require_modules == ("myapp", "other.jobs", "third")
    assert (settings.queue_spec.names, settings.queue_spec.weights) == (("critical", "default"), (3, 1))
    assert (settings.concurrency, settings.redis_url, settings.log_level) == (
        3,
        "redis://example:6390/2",
        "debug",
    )
    assert settings.timeout_s == 12  # what no option names still comes from the environment


def test_without_options_the_environment_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    use_only(monkeypatch, {"COGWORKER_REQUIRE": "from_env", "COGWORKER_QUEUES": "a,b"})
    assert run.overrides(parsed()) == {}
    settings = load_settings(**run.overrides(parsed()))
    assert (settings.require_modules, settings.queue_spec.names) == (("from_env",), ("a", "b"))


def test_repeated_queue_options_join_in_order() -> None:
    assert run.overrides(parsed("-Q", "critical", "-Q", "default,low"))["queues"] == "critical,default,low"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-c", "0"], "argument -c/--concurrency: '0': must be 1 or more"),
        (["-c", "many"], "argument -c/--concurrency: 'many' is not a whole number"),
        (["-Q", "a b"], "argument -Q/--queues: 'a b': 'a b' is not a queue name"),
        (["-Q", "a,a"], "queue 'a' is listed twice"),
        (["myapp.py"], "argument MODULE: 'myapp.py' is a file name: give the module's name (myapp)"),
        (["my-app"], "argument MODULE: 'my-app' is not a module name"),
        (["--log-level", "loud"], "argument --log-level: invalid choice: 'loud'"),
        (["--verbose"], "unrecognized arguments: --verbose"),
    ],
)
def test_a_bad_option_is_a_usage_error_naming_it(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert err.startswith("usage: cogworker"), err


def test_queue_options_that_only_disagree_together_are_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "-Q", "a:2", "-Q", "b"]) == 2
    assert capsys.readouterr().err.strip() == (
        "cogworker: -Q/--queues a:2,b: give every queue a weight (a:3,b:1) or none (a,b), not a mix"
    )


def test_help_lists_run_swarm_and_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    for verb in ("run ", "swarm ", "settings "):
        assert f"\n    {verb}" in listed, listed
    assert main(["run", "--help"]) == 0
    run_help = capsys.readouterr().out
    for option in ("-Q QUEUES, --queues QUEUES", "-c N, --concurrency N", "--redis-url URL", "MODULE"):
        assert option in run_help
