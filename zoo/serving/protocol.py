"""What every endpoint's request shares: the JSON body parsed, its fields checked against the endpoint's table
and read into one typed record, and the error bodies OpenAI's API returns for bad ones: ``{"error":
{"message", "type", "param", "code"}}`` with a 4xx status. Each accepted field is one row of a table (its
type, its range, its default), so a new field is a row, not a branch; each endpoint's own rows and reading
are its entry's (zoo.serving.endpoint)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_N = 64  # choices per request (each is one row of the running batch)
MAX_STOP = 4  # stop sequences per request, as OpenAI allows
BIAS_RANGE = 100  # logit_bias values lie in [-100, 100]


class APIError(Exception):
    """A request the server refuses: HTTP `status` and OpenAI's error body."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def parse_json(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 saying why not."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise APIError(400, "We could not parse the JSON body of your request: it nests arrays or objects "
                            "deeper than this server reads.") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an integer of more than 4300 digits
        raise APIError(400, f"We could not parse the JSON body of your request ({e}). The body must be one "
                            "JSON object, e.g. {\"model\": ..., \"prompt\": ...}.") from None
    if not isinstance(body, dict):
        raise APIError(400, f"The request body must be a JSON object, got a JSON {_json_type(body)}.")
    _check_unicode(body)
    return body


def _check_unicode(body: dict[str, Any]) -> None:
    """Every string of the body is valid Unicode: JSON's `\\ud800` escapes decode to lone surrogates, which
    no tokenizer encodes and no response can carry."""
    stack: list[tuple[str, Any]] = [(name, value) for name, value in body.items()]
    stack += [(name, name) for name in body]
    while stack:
        field, value = stack.pop()
        if isinstance(value, dict):
            stack += [(field, v) for v in value.values()] + [(field, k) for k in value]
        elif isinstance(value, list):
            stack += [(field, v) for v in value]
        elif isinstance(value, str) and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                name = field.encode("utf-8", "backslashreplace").decode("utf-8")  # a key may be the culprit
                raise APIError(400, f"Invalid '{name}': it holds a lone surrogate ({value[e.start]!r}), "
                                    "which is not a Unicode character; send text as valid UTF-8.",
                               param=name, code="invalid_value") from None


@dataclass(frozen=True)
class Field:
    """One accepted body field: `kind` (a name in KINDS), its default, bounds, and `only` (the values a field
    this server does not implement may take: OpenAI's 'off' values)."""

    kind: str
    default: Any = None
    low: float | None = None
    high: float | None = None
    required: bool = False
    only: tuple[Any, ...] | None = None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def is_ids(v: Any) -> bool:
    return isinstance(v, list) and len(v) > 0 and all(_is_int(i) for i in v)


# kind -> (test, what OpenAI's message calls it)
KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "string": (lambda v: isinstance(v, str), "a string"),
    "integer": (_is_int, "an integer"),
    "number": (_is_number, "a number"),
    "boolean": (lambda v: isinstance(v, bool), "a boolean"),
    "object": (lambda v: isinstance(v, dict), "an object"),
    "stop": (lambda v: isinstance(v, str) or (isinstance(v, list) and all(isinstance(s, str) for s in v)),
             "a string or an array of strings"),
    "prompt": (lambda v: isinstance(v, str) or is_ids(v) or (isinstance(v, list) and len(v) > 0 and (
        all(isinstance(p, str) for p in v) or all(is_ids(p) for p in v))),
               "a string, an array of strings, an array of token ids or an array of such arrays"),
    "messages": (lambda v: isinstance(v, list), "an array of messages"),
    "any": (lambda v: True, "anything"),
}

COMMON: dict[str, Field] = {
    "model": Field("string", required=True),
    "max_tokens": Field("integer", low=0),
    "temperature": Field("number", 1.0, low=0, high=2),
    "top_p": Field("number", 1.0, low=0, high=1),
    "n": Field("integer", 1, low=1, high=MAX_N),
    "stream": Field("boolean", False),
    "stream_options": Field("object"),
    "stop": Field("stop"),
    "seed": Field("integer", low=0, high=2**63 - 1),
    "user": Field("string"),
    "presence_penalty": Field("number", 0, low=-2, high=2),
    "frequency_penalty": Field("number", 0, low=-2, high=2),
    "logit_bias": Field("object"),
}


@dataclass
class Request:
    """A checked request: what to continue (`prompts`: texts or token ids; chat: `messages`) and how."""

    model: str
    prompts: list[str | list[int]] = field(default_factory=list)
    messages: list[dict[str, Any]] | None = None
    max_tokens: int | None = None  # None: the endpoint's default (completion 16, chat: the context left)
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    n: int = 1
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    logprobs: int | None = None  # None: not asked; n: each token's log-probability and the n most likely
    echo: bool = False  # completions: the prompt comes back before the completion (with its logprobs)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> bias (ids checked by the app)


def read_fields(body: dict[str, Any], fields: dict[str, Field]) -> dict[str, Any]:
    """Every field of `fields` read from `body` (its default when absent or null), each checked against its
    row; the first problem is a 400 naming it."""
    for name in body:
        if name not in fields:
            raise APIError(400, f"Unrecognized request argument supplied: {name}", param=name)
    values = {}
    for name, spec in fields.items():
        value = body.get(name)
        if value is None:
            if spec.required:
                raise APIError(400, f"Missing required parameter: '{name}'.", param=name,
                               code="missing_required_parameter")
            values[name] = spec.default
            continue
        test, what = KINDS[spec.kind]
        if not test(value):
            raise APIError(400, f"Invalid type for '{name}': expected {what}, but got "
                                f"{_json_type(value)} instead.", param=name, code="invalid_type")
        _check_range(name, spec, value)
        if spec.only is not None and value not in spec.only:
            raise APIError(400, f"'{name}'={json.dumps(value)} is not supported by this server; leave it out "
                                f"(or {json.dumps(spec.only[0])}).", param=name, code="unsupported_parameter")
        values[name] = value
    return values


def _check_range(name: str, spec: Field, value: Any) -> None:
    if spec.kind not in ("integer", "number"):
        return
    kind = "integer" if spec.kind == "integer" else "decimal"
    if spec.low is not None and value < spec.low:
        raise APIError(400, f"Invalid '{name}': {kind} below minimum value. Expected a value >= "
                            f"{spec.low:g}, but got {value} instead.", param=name,
                       code=f"{kind}_below_min_value")
    if spec.high is not None and value > spec.high:
        raise APIError(400, f"Invalid '{name}': {kind} above maximum value. Expected a value <= "
                            f"{spec.high:g}, but got {value} instead.", param=name,
                       code=f"{kind}_above_max_value")


def common_request(v: dict[str, Any]) -> Request:
    """The Request of the checked values of the fields every endpoint shares (COMMON); the endpoint's entry
    reads its own fields into it."""
    stop = [v["stop"]] if isinstance(v["stop"], str) else list(v["stop"] or [])
    if len(stop) > MAX_STOP or any(s == "" for s in stop):
        raise APIError(400, f"Invalid 'stop': give at most {MAX_STOP} non-empty strings, got {stop!r}.",
                       param="stop")
    if v["top_p"] == 0:
        raise APIError(400, "Invalid 'top_p': it must be in (0, 1] (1 = off); 0 would keep no token.",
                       param="top_p", code="decimal_below_min_value")
    options = v["stream_options"] or {}
    if options and not v["stream"]:
        raise APIError(400, "Invalid 'stream_options': only allowed when 'stream' is true.",
                       param="stream_options")
    if set(options) - {"include_usage"} or not isinstance(options.get("include_usage", False), bool):
        raise APIError(400, f"Invalid 'stream_options': only {{\"include_usage\": true|false}} is supported, "
                            f"got {options!r}.", param="stream_options")
    return Request(v["model"], max_tokens=v["max_tokens"], temperature=float(v["temperature"]),
                   top_p=float(v["top_p"]), n=v["n"], seed=v["seed"], stop=stop, stream=v["stream"],
                   include_usage=options.get("include_usage", False),
                   presence_penalty=float(v["presence_penalty"]),
                   frequency_penalty=float(v["frequency_penalty"]), logit_bias=_logit_bias(v["logit_bias"]))


def _logit_bias(bias: dict[str, Any] | None) -> dict[int, float]:
    """OpenAI's {"token id": bias} with ids as strings and biases in [-100, 100]; ids are checked against the
    vocabulary by the app."""
    out = {}
    for key, value in (bias or {}).items():
        if not (key.isascii() and key.isdigit()) or len(key) > 18:  # '²' is a digit to isdigit, not int()
            raise APIError(400, f"Invalid key in 'logit_bias': {key}. You should only be submitting "
                                "non-negative integers.", param="logit_bias", code="invalid_value")
        if not _is_number(value) or not -BIAS_RANGE <= value <= BIAS_RANGE:
            raise APIError(400, f"Invalid value for 'logit_bias': {value!r} for token {key}. Logit bias "
                                f"values should be numbers between -{BIAS_RANGE} and {BIAS_RANGE}.",
                           param="logit_bias", code="invalid_value")
        out[int(key)] = float(value)
    return out


def _json_type(value: Any) -> str:
    names = ((bool, "a boolean"), (int, "an integer"), (float, "a decimal"), (str, "a string"),
             (list, "an array"), (dict, "an object"))
    return next((name for t, name in names if isinstance(value, t)), "null")
