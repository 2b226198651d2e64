"""The OpenAPI description of the request bodies, derived from each endpoint's field table (one source: a
field added there is documented, and fuzzed by tests/serving/test_fuzz.py, with no second list),
and OpenAI's error body that every 4xx carries. Served at /openapi.json."""

from __future__ import annotations

from typing import Any

from zoo.serving.endpoint import Endpoint
from zoo.serving.protocol import MAX_STOP, Field
from zoo.tokenizers.chat import MESSAGE_ROLES

_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}
_TEXT = {"type": "string", "minLength": 1}
KIND_SCHEMAS: dict[str, dict[str, Any]] = {  # protocol.KINDS' names -> JSON Schema
    "string": {"type": "string"},
    "integer": {"type": "integer"},
    "number": {"type": "number"},
    "boolean": {"type": "boolean"},
    "object": {"type": "object"},
    "stop": {"anyOf": [_TEXT, {"type": "array", "items": _TEXT, "maxItems": MAX_STOP}]},
    "prompt": {"anyOf": [_TEXT, {"type": "array", "items": _TEXT, "minItems": 1},
                         _IDS, {"type": "array", "items": _IDS, "minItems": 1}]},
    "messages": {"type": "array", "minItems": 1, "items": {
        "type": "object", "required": ["role", "content"],
        "properties": {"role": {"enum": list(MESSAGE_ROLES)}, "content": {"type": "string"}}}},
    "any": {},
}
BOUNDS = {"top_p": {"exclusiveMinimum": 0}}  # checks protocol makes beyond its field table (top_p 0)
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["error"], "additionalProperties": False,
    "properties": {"error": {
        "type": "object", "required": ["message", "type", "param", "code"], "additionalProperties": False,
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}},
}


def field_schema(spec: Field, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One field's JSON Schema: its kind, bounds (and `extra` ones) and the values a field this server does
    not implement may take; optional fields may be null (null means the default)."""
    schema = {**KIND_SCHEMAS[spec.kind], **(extra or {})}
    if spec.low is not None:
        schema["minimum"] = spec.low
    if spec.high is not None:
        schema["maximum"] = spec.high
    if spec.only is not None:
        values = [v for v in spec.only if v is not None]
        schema = {"enum": values} if values else {"type": "null"}
    return schema if spec.required else {"anyOf": [schema, {"type": "null"}]}


def request_body(endpoint: Endpoint, model: str) -> dict[str, Any]:
    """The OpenAPI `requestBody` and error responses of `endpoint`'s route on a server serving `model`, for
    FastAPI's `openapi_extra`."""
    fields = endpoint.fields
    properties = {name: field_schema(spec, BOUNDS.get(name, {})) for name, spec in fields.items()}
    properties["model"] = {"enum": [model]}  # the one model served; another name is a 404
    body = {"type": "object", "additionalProperties": False,
            "required": [name for name, spec in fields.items() if spec.required], "properties": properties}
    error = {"description": "OpenAI's error body", "content": {"application/json": {"schema": ERROR_SCHEMA}}}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
            "responses": {"4XX": error}}
