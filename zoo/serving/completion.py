"""/v1/completions: text (or token ids) continued. Its fields beyond the common ones: `prompt` (one or
several, text or token ids), `echo` (the prompt comes back first), `logprobs` (0-5 alternatives), and OpenAI's
`best_of` and `suffix` in their 'off' values only; 16 completion tokens when `max_tokens` is not given."""

from __future__ import annotations

from typing import Any

from zoo.serving.endpoint import ENDPOINTS, Endpoint, Limits, LogprobEntry
from zoo.serving.logprobs import Decode, completion_logprobs
from zoo.serving.protocol import COMMON, APIError, Field, Request, is_ids

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
MAX_LOGPROBS = 5  # OpenAI's bound on `logprobs`


class Completion(Endpoint):
    name, path, route_name, prompt_param = "completion", "/v1/completions", "completions", "prompt"
    id_prefix, object, chunk_object = "cmpl", "text_completion", "text_completion"
    fields = {**COMMON, "prompt": Field("prompt", required=True),
              "echo": Field("boolean", False), "best_of": Field("integer", only=(1, None)),
              "suffix": Field("string", only=(None,)),
              "logprobs": Field("integer", low=0, high=MAX_LOGPROBS)}

    def read(self, values: dict[str, Any], request: Request) -> None:
        request.logprobs, request.echo = values["logprobs"], values["echo"]
        prompt = values["prompt"]
        one = isinstance(prompt, str) or is_ids(prompt)
        request.prompts = [prompt] if one else list(prompt)

    def prompt_ids(self, tokenizer: Any, limits: Limits, request: Request) -> list[list[int]]:
        """Text encoded without special tokens (as generate.py does), token ids as given."""
        prompts = []
        for i, prompt in enumerate(request.prompts):
            if not isinstance(prompt, str) and len(prompt) >= limits.context:  # before looking at each id
                self.too_long(limits, len(prompt), request.max_tokens or 0)
            ids = tokenizer.encode(prompt) if isinstance(prompt, str) else prompt
            if not ids:
                raise APIError(400, f"Invalid 'prompt': prompt {i} encodes to no tokens; give some text.",
                               param="prompt")
            bad = [t for t in ids if not 0 <= t < limits.vocab_size]
            if bad:
                raise APIError(400, f"Invalid 'prompt': token ids {bad[:5]} are outside the vocabulary "
                                    f"[0, {limits.vocab_size}).", param="prompt")
            prompts.append(ids)
        return prompts

    def default_max_tokens(self, limits: Limits, longest: int) -> int:
        return DEFAULT_MAX_TOKENS

    def logprobs(self, entries: list[LogprobEntry], decode: Decode) -> dict[str, Any]:
        return completion_logprobs([(t, lp) for t, lp, _ in entries], [offset for _, _, offset in entries],
                                   decode)

    def choice(self, index: int, text: str, finish: str | None, logprobs: dict[str, Any] | None, *,
               chunk: bool) -> dict[str, Any]:
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}


ENDPOINTS.register(Completion.name, Completion())
