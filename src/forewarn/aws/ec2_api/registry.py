"""The actions the API answers, by name. An action module registers each of its handlers with :func:`action`; the
app (app.py) lists the action modules, and dispatches a request's ``Action`` here.

To add an action: write its handler in the module of its group (or a new module, then listed in
``app.ACTION_MODULES``), decorated ``@action("TheActionName")``. The handler takes the backend (the one door into the
engine; a new engine read or command gets a method there), the request's :class:`Params` and its request ID; it
checks its parameters (``params.check_known`` first, so an unknown one is refused), raises :class:`Ec2Error` to
refuse, and returns ``protocol.answer(...)``. docs/aws-api.md documents each action's parameters and errors."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.responses import Response

from forewarn.aws.ec2_api.backend import Ec2Backend
from forewarn.aws.ec2_api.params import Params

# (the engine's door, the request's parameters, its request ID) → the answer; refusals raise Ec2Error. A handler that
# changes something is a coroutine function: its command goes through the group commit, awaited.
Handler = Callable[[Ec2Backend, Params, str], Response | Awaitable[Response]]

ACTIONS: dict[str, Handler] = {}


def action(name: str) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of the EC2 action ``name`` (its exact wire spelling)."""

    def register(handler: Handler) -> Handler:
        known = ACTIONS.get(name)
        if known is not None and known.__qualname__ != handler.__qualname__:
            raise RuntimeError(f"the EC2 action {name} is registered twice")
        ACTIONS[name] = handler
        return handler

    return register
