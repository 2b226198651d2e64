"""The record of one picked token's log-probabilities, which the engine fills (zoo.generation.continuous.
raw_logprobs) and the server renders (zoo.serving.logprobs). Free of torch: the server's worker processes
import the endpoints, hence this."""

from __future__ import annotations

from dataclasses import dataclass

FLOOR = -9999.0  # OpenAI's value for a log-probability too small to show (JSON has no -inf)


@dataclass(frozen=True)
class TokenLogprob:
    """The picked token's log-probability and the `top` most likely (token id, log-probability) pairs."""

    logprob: float
    top: tuple[tuple[int, float], ...]
