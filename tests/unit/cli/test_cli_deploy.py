"""`cogworker deploy print-*`: the deploy kit shipped in the package, printed without settings or Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cogworker import exitcodes
from cogworker.cli.main import main
from tests.support.paths import ROOT
from tests.support.redis_server import free_port

KIT = ROOT / "cogworker" / "deploy_kit"
PRINTS = {
    "print-unit": "cogworker@.service",
    "print-target": "cogworker.target",
    "print-env": "cogworker.env.example",
    "print-install": "install.sh",
}


@pytest.mark.parametrize("verb", sorted(PRINTS))
def test_each_file_prints_as_a_first_call_with_bad_settings_and_no_redis(verb: str, tmp_path: Path) -> None:
    # A fresh interpreter in an empty directory, with a setting that would stop any other verb and a
    # Redis that isn't there: the kit is what an operator prints before either is right.
    env = {k: v for k, v in os.environ.items() if not k.startswith("COGWORKER_")}
    env.update(COGWORKER_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0", COGWORKER_CONCURRENCY="0")
    done = subprocess.run(
        [sys.executable, "-m", "cogworker", "deploy", verb],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == exitcodes.OK, done.stderr
    assert done.stdout == (KIT / PRINTS[verb]).read_text()
    assert done.stderr == ""


def test_deploy_names_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy"]) == exitcodes.USAGE
    assert "print-unit" in capsys.readouterr().err
    assert main(["deploy", "print-nothing"]) == exitcodes.USAGE


def test_the_help_points_at_the_env_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == exitcodes.OK
    assert "`cogworker deploy print-env` prints them all" in " ".join(capsys.readouterr().out.split())


def test_a_reader_that_goes_away_gets_no_traceback() -> None:
    # `cogworker deploy print-env | head -1`: the pipe's read end closed before the file is written.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "cogworker", "deploy", "print-env"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=30,
        )
    finally:
        os.close(write_end)
    assert done.returncode == exitcodes.FAILURE
    assert done.stderr == ""
