"""The timings every scenario is resolved in: a module of its own, so that the CLI can offer them without loading
the spec (YAML) or the runner."""

TIMINGS = ("fast", "realistic")
DEFAULT_TIMING = "realistic"
