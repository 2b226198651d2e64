"""An OpenAI-compatible HTTP server with continuous batching (apps floor): `python serve.py ckpt=...`.

``protocol`` reads and checks request bodies into typed records (OpenAI's 4xx error bodies for bad ones),
``endpoint`` is the base of one class per endpoint (``completion``, ``chat``: each its fields, prompt ids,
default budget and rendering; ``ENDPOINTS`` registers them), ``prepare`` makes a body ready (parsed, checked,
chat rendered, tokenized) in the processes of ``workers`` (a time and memory budget each, off the event loop),
``guard`` checks the API key, content type and body size, ``schema`` describes the bodies in OpenAPI,
``logprobs`` renders the log-probabilities in OpenAI's formats, ``mailbox`` carries its tokens to the event
loop, ``text`` turns them into streamed text (stop strings), ``app`` is the FastAPI application (routes,
server-sent events), and ``cli`` is the command line. The engine that owns the model and steps the running
batch is zoo.generation.continuous (core floor: no HTTP). See docs/serving.md."""
