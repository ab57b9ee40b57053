"""The steering routes' handlers: a runtime message to a run, pause and resume (the world's
`steering` mixin does the work; these turn its refusals into the API's 409 and 422 answers)."""

from __future__ import annotations

from smrweb.simulator.server.context import Ctx, HttpError, Response
from smrweb.simulator.server.handlers import _project
from smrweb.simulator.world import Conflict
from smrweb.simulator.world.steering import Unprocessable


def h_enqueue_message(ctx: Ctx) -> Response:
    if ctx.body is None or not isinstance(ctx.body, dict):
        raise HttpError(
            422,
            [
                {
                    "type": "dict_type",
                    "loc": ["body"],
                    "msg": "Input should be a valid dictionary",
                    "input": ctx.body,
                }
            ],
        )
    try:
        return Response(payload=ctx.world.enqueue_message(ctx.params["run_id"], ctx.body))
    except Unprocessable as exc:
        raise HttpError(422, [exc.error]) from None
    except Conflict as exc:
        raise HttpError(409, exc.detail) from None


def h_pause(ctx: Ctx) -> Response:
    return _lifecycle(ctx, ctx.world.pause)


def h_resume(ctx: Ctx) -> Response:
    return _lifecycle(ctx, ctx.world.resume)


def _lifecycle(ctx: Ctx, action) -> Response:
    if ctx.params.get("project_id") is not None:
        _project(ctx)
    try:
        return Response(payload=action(ctx.params["run_id"], ctx.params.get("project_id")))
    except Conflict as exc:
        raise HttpError(409, exc.detail) from None
