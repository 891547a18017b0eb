"""pytest-timeout's per-test limit, stretched by the load like the tests' own waits.

The tests' waits have load-scaled deadlines (tests/harness/loadscale.py): at load 20 on
2 CPUs a controller e2e wait of 540 s may take up to 4 times that. pytest-timeout's limit
(``timeout = 600`` in pyproject.toml, or a test's ``timeout`` mark) is the net for a test
that hangs; fixed, it cut such a test while its own wait was still within its deadline
(tests/integration/test_controller_e2e.py's climb to manual, load-sensitive at load 20-27).
So the limit is the configured figure times the load factor when the test starts (the
timer is set once; a load that rises later is covered by the waits' own stretch up to the
factor they read then). A hang is still caught, later on a loaded machine.

This implements pytest-timeout's ``pytest_timeout_set_timer`` hook (its documented way to
change how the timer is set) and hands the scaled settings to pytest-timeout's own timer.
"""

from __future__ import annotations

import pytest

from tests.harness import loadscale


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # a pytest-timeout hook
def pytest_timeout_set_timer(item: pytest.Item, settings) -> bool:
    import pytest_timeout

    stretched = settings._replace(timeout=settings.timeout * loadscale.factor())
    pytest_timeout.pytest_timeout_set_timer(item, stretched)
    return True  # the timer is set (firstresult: pytest-timeout's own impl is not called)
