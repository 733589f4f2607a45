# The battery's fixture, as the ``forewarn.conformance.plugin`` pytest11 entry point gives it to an installed forewarn;
# the suite turns the installed plugins off (pyproject.toml's addopts: they would import forewarn from wherever it was
# installed, not from this checkout) and takes the fixture from this checkout's code.
from forewarn.conformance.plugin import forewarn_conformance  # noqa: F401
