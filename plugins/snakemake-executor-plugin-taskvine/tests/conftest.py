"""The executor's tests: their markers, options and fixtures are in taskvine_fixtures (shared with the workflow's
tests, which load it the same way)."""

pytest_plugins = ["taskvine_fixtures"]
