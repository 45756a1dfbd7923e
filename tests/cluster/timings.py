"""Wall times of the cluster tier, printed at the end of the run (one dict shared by the
fixtures and the tests: pytest may import conftest.py under a second module name)."""

TIMINGS: dict[str, float] = {}
