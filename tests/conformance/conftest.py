# The battery's fixture, as the ``forewarn-conformance`` pytest11 entry point gives it to an installed forewarn
# (this checkout may run from a virtual environment installed before the entry point existed).
from forewarn.conformance.plugin import forewarn_conformance  # noqa: F401
