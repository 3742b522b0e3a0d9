"""What the tests share: real Redis servers, worker and swarm processes, CLI runners, fixtures' parts.

Nothing here is collected by pytest; test modules import it (`from tests.support.x import ...`), and
no test module imports another.
"""
