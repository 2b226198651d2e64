"""One OpenAI endpoint over the shared serving machinery (vLLM's entrypoints/openai/<endpoint> idea): each
entry of `ENDPOINTS` answers for itself (its route, its request fields, how its body becomes prompt token
ids, its default completion budget, and how a choice, its log-probabilities and a stream's opening look),
so the workers, the run and the engine never ask which endpoint a request came through. A new endpoint is
one module registering one subclass (zoo.serving.completion, zoo.serving.chat)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, NoReturn

from zoo.generation.continuous.token_logprob import TokenLogprob
from zoo.registry import Registry
from zoo.serving.logprobs import Decode
from zoo.serving.protocol import APIError, Field, Request, common_request, read_fields

# (token id, its log-probabilities (None: an echoed prompt's first token), its character offset in the text)
LogprobEntry = tuple[int, TokenLogprob | None, int]


@dataclass(frozen=True)
class Limits:
    """What a request is checked against: the served name, the vocabulary size, the context (prompt +
    completion tokens)."""

    name: str
    vocab_size: int
    context: int


class Endpoint(ABC):
    """An OpenAI endpoint: a subclass sets the class attributes and says how its request reads, becomes
    prompts and renders. Instances hold no state (a worker process receives one with each job)."""

    name: str  # its ENDPOINTS name ("completion", "chat")
    path: str  # the route, e.g. "/v1/completions"
    route_name: str  # FastAPI's name of the route (the OpenAPI operationId is derived from it)
    fields: dict[str, Field]  # every body field it accepts (protocol.COMMON and its own)
    prompt_param: str  # the field holding what to continue: named when the prompt is too long
    id_prefix: str  # response ids are "<id_prefix>-<hex>"
    object: str  # the response's `object`
    chunk_object: str  # a streamed chunk's `object`

    def read_request(self, body: dict[str, Any]) -> Request:
        """Check every field of `body` against this endpoint's table (the first problem is a 400 naming it)
        and read it into a Request."""
        values = read_fields(body, self.fields)
        request = common_request(values)
        self.read(values, request)
        return request

    @abstractmethod
    def read(self, values: dict[str, Any], request: Request) -> None:
        """Fill `request` from the checked values of this endpoint's own fields."""

    @abstractmethod
    def prompt_ids(self, tokenizer: Any, limits: Limits, request: Request) -> list[list[int]]:
        """Each prompt's token ids (checked against the vocabulary), or the APIError that refuses them."""

    @abstractmethod
    def default_max_tokens(self, limits: Limits, longest: int) -> int:
        """The completion budget when the request sets none (`longest`: the longest prompt's tokens)."""

    @abstractmethod
    def logprobs(self, entries: list[LogprobEntry], decode: Decode) -> dict[str, Any]:
        """A choice's log-probabilities in this endpoint's format."""

    @abstractmethod
    def choice(self, index: int, text: str, finish: str | None, logprobs: dict[str, Any] | None, *,
               chunk: bool) -> dict[str, Any]:
        """One choice of a whole response, or (chunk) of one streamed chunk."""

    def opening(self, index: int) -> dict[str, Any] | None:
        """The choice a stream sends for choice `index` before any text (None: nothing)."""
        return None

    def too_long(self, limits: Limits, longest: int, wanted: int) -> NoReturn:
        """The 400 of a prompt of `longest` tokens plus `wanted` completion tokens past the context."""
        param = self.prompt_param
        raise APIError(400, f"This model's maximum context length is {limits.context} tokens. However, you "
                            f"requested {longest + wanted} tokens ({longest} in the {param}, {wanted} in the "
                            "completion). Please reduce the length of the prompt or the completion.",
                       param=param, code="context_length_exceeded")


ENDPOINTS: Registry[Endpoint] = Registry("endpoint")
