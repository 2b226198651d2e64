"""The FastAPI application: /v1/models and one route per registered endpoint (zoo.serving.endpoint.ENDPOINTS:
/v1/completions, /v1/chat/completions) in OpenAI's formats, each request's choices handed to the engine as
sequences and their tokens turned back into text (whole JSON, or server-sent events ending with
`data: [DONE]` when `stream` is true). Every refusal is an OpenAI error body
with a 4xx status (zoo.serving.protocol); a client that goes away cancels its sequences, freeing their rows
at the next step boundary."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from fastapi import Depends, FastAPI
from fastapi import Request as HTTPRequest
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException

import zoo.serving.chat  # noqa: F401  (registers /v1/chat/completions)
import zoo.serving.completion  # noqa: F401  (registers /v1/completions)
from zoo.generation.config import GenerationConfig
from zoo.generation.continuous.engine import QueueFull, Sequence
from zoo.generation.continuous.penalties import Penalties
from zoo.generation.continuous.token_logprob import TokenLogprob
from zoo.generation.logits import Choice
from zoo.generation.stopping import RowStop
from zoo.serving.endpoint import ENDPOINTS, Endpoint
from zoo.serving.guard import DEFAULT_MAX_BODY_MB, key_check, read_body
from zoo.serving.mailbox import Mailbox
from zoo.serving.prepare import check_model
from zoo.serving.protocol import APIError, Request
from zoo.serving.run import Run
from zoo.serving.schema import request_body
from zoo.serving.served import Served

__all__ = ["Served", "create_app", "choice_for"]

log = logging.getLogger(__name__)


def create_app(served: Served, *, api_key: str | None = None,
               max_body_mb: float = DEFAULT_MAX_BODY_MB) -> FastAPI:
    """The ASGI application for `served` (its engine must be started by the caller). `api_key`: every route
    wants `Authorization: Bearer <api_key>`; `max_body_mb`: larger request bodies get 413."""
    app = FastAPI(title="zoo", docs_url=None, redoc_url=None, openapi_url="/openapi.json",
                  dependencies=[Depends(key_check(api_key))] if api_key else [])
    app.state.served = served
    app.state.mailbox = None  # made on the first request, in the server's event loop

    @app.exception_handler(APIError)
    async def api_error(_request: HTTPRequest, e: APIError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(HTTPException)
    async def http_error(request: HTTPRequest, e: HTTPException) -> JSONResponse:
        message = (f"Unknown request URL: {request.method} {request.url.path}." if e.status_code == 404
                   else str(e.detail))
        return JSONResponse(APIError(e.status_code, message).body(), status_code=e.status_code)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: HTTPRequest, e: RequestValidationError) -> JSONResponse:
        return JSONResponse(APIError(400, str(e)).body(), status_code=400)

    @app.exception_handler(Exception)
    async def server_error(_request: HTTPRequest, e: Exception) -> JSONResponse:  # a bug: still a JSON body
        log.exception("request failed")
        error = APIError(500, f"The server failed: {type(e).__name__}.", type="server_error")
        return JSONResponse(error.body(), status_code=500)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [_model_card(served)]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict[str, Any]:
        check_model(served.limits, model_id)
        return _model_card(served)

    async def complete(request: HTTPRequest, endpoint: Endpoint):
        raw = await read_body(request, max_body_mb)
        prepared = await served.workers.prepare(raw, endpoint, wait=served.timeout)  # off the event loop
        req, prompts = prepared.request, prepared.prompts
        queue: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        if app.state.mailbox is None or app.state.mailbox.loop is not loop:
            app.state.mailbox = Mailbox(loop)
        seqs = _sequences(served, req, prompts, prepared.max_tokens, queue, app.state.mailbox)
        try:
            served.engine.submit(seqs)
        except QueueFull as e:
            raise APIError(429, f"The server is busy ({e}); retry later.", type="requests",
                           code="rate_limit_exceeded") from None
        run = Run(served, endpoint, req, prompts, seqs, queue)
        if req.stream:
            return StreamingResponse(run.sse(), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return JSONResponse(await run.whole(request.is_disconnected))

    def answering(endpoint: Endpoint):
        async def route(request: HTTPRequest):
            return await complete(request, endpoint)

        return route

    for name in ENDPOINTS:
        endpoint = ENDPOINTS[name]
        app.post(endpoint.path, name=endpoint.route_name,
                 openapi_extra=request_body(endpoint, served.name))(answering(endpoint))
    return app


def _model_card(served: Served) -> dict[str, Any]:
    return {"id": served.name, "object": "model", "created": served.created, "owned_by": "zoo",
            "max_model_len": served.context}


def choice_for(req: Request, k: int, device: Any = "cpu") -> Choice:
    """How choice k picks tokens: greedy when temperature is 0, else sampling with temperature and top-p
    from a generator seeded with `seed + k` (unseeded: torch's global generator). Choice k of a seeded
    request equals `model.generate(ids, do_sample=True, temperature=t, top_p=p, seed=seed + k)`."""
    if req.temperature == 0:
        return GenerationConfig().choice(device)
    seed = None if req.seed is None else req.seed + k
    return GenerationConfig(do_sample=True, temperature=req.temperature,
                            top_p=req.top_p if req.top_p < 1 else None, seed=seed).choice(device)


def _sequences(served: Served, req: Request, prompts: list[list[int]], max_tokens: int,
               queue: asyncio.Queue, mailbox: Mailbox) -> list[Sequence]:
    """One sequence per (prompt, choice), index prompt * n + choice; tokens come back on `queue`."""
    score_prompt = req.echo and req.logprobs is not None
    if max_tokens == 0 and not score_prompt:
        return []
    device = next(served.model.parameters()).device
    deadline = time.monotonic() + served.timeout
    penalise = bool(req.presence_penalty or req.frequency_penalty or req.logit_bias)
    seqs = []
    for p, prompt in enumerate(prompts):
        for k in range(req.n):
            index = p * req.n + k

            def deliver(token: int | None, finish: str | None,
                        logprob: TokenLogprob | list[TokenLogprob] | None, index: int = index) -> None:
                mailbox.post(queue, (index, token, finish, logprob))

            seqs.append(Sequence(
                prompt, max_tokens, choice_for(req, k, device), served.stop_ids, deliver, deadline,
                stop=RowStop(req.stop, served.tokenizer.decode) if req.stop else None,
                penalties=Penalties(req.frequency_penalty, req.presence_penalty, req.logit_bias)
                if penalise else None,
                logprobs=req.logprobs, prompt_logprobs=req.logprobs if score_prompt else None))
    return seqs
