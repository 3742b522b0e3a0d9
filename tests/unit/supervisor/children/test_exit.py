"""supervisor/children/exit.py: how a forked child ends. Run in a fresh interpreter, since it ends the
process it runs in."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from cogworker import exitcodes


def run(body: str) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(
        f"""
        import atexit, sys
        from supervisor.children.exit import exit_child

        atexit.register(lambda: print("atexit ran"))  # os._exit skips it, as a fork's child must

        def body():
            {body}

        print("buffered", end="")  # unflushed when the body ends: exit_child flushes it
        exit_child(body)
        print("returned")  # never reached: the child does not run its parent's code
        """
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_the_bodys_exit_code_is_the_processs_and_nothing_after_it_runs() -> None:
    done = run("return 7")
    assert done.returncode == 7
    assert done.stdout == "buffered"


def test_an_exception_is_printed_and_exits_with_failure() -> None:
    done = run("raise RuntimeError('boom in the child')")
    assert done.returncode == exitcodes.FAILURE
    assert done.stdout == "buffered"
    assert "Traceback" in done.stderr and "RuntimeError: boom in the child" in done.stderr
