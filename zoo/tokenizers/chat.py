"""Chat templates: a conversation rendered to text and ids exactly as transformers' ``apply_chat_template``
renders them (no tools or documents), so a chat model sees the prompt it was trained on.

A Hugging Face folder's template is ``chat_template.jinja`` (plus ``additional_chat_templates/<name>.jinja``),
else ``tokenizer_config.json``'s ``chat_template`` (one string, or ``[{"name", "template"}, ...]``); of named
templates, ``default`` is used. It is rendered by Jinja's immutable sandbox with transformers' rules:
``trim_blocks``, ``lstrip_blocks``, loop controls, ``raise_exception``, ``strftime_now``, ``tojson`` (not
HTML-escaping), ``namespace``, ``dict``, a no-op ``{% generation %}`` tag, and the variables ``messages``,
``add_generation_prompt``, ``tools=None``, ``documents=None`` and the tokenizer's ``bos_token``,
``eos_token``, ... (none that it lacks). The text is encoded with special-token text matched as those tokens
and nothing added around it (the template writes BOS itself, so it is never doubled):
``ZooTokenizer.chat_ids(messages)``.

``continue_final_message=True`` renders the conversation so that it ends inside its last message, with no
end-of-turn after it (the model continues that message: lm-eval's ``gen_prefix``, a prefilled reply), by
transformers' rule (4.57 on): the message's text is rendered with :data:`CONTINUE_TAG` after it and the
text is cut where the marker starts (and trailing whitespace dropped too when the template trimmed the
marker's space).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

CHAT_TEMPLATE_FILE = "chat_template.jinja"
CHAT_TEMPLATE_DIR = "additional_chat_templates"
MESSAGE_ROLES = ("system", "user", "assistant", "tool")
DEFAULT_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ bos_token + message['role'] + '\\n' + message['content'] + eos_token + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ bos_token + 'assistant\\n' }}{% endif %}"
)
ChatTemplate = str | dict[str, str]  # one template, or named ones ("default", "tool_use", ...)
# Appended to the final message's text to find where it ends in the rendered chat (transformers' marker, so a
# template that edits or trims it cuts in the same place)
CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "
GENERATION_MARK = "\U000f0000"  # private use: written around {% generation %} blocks (generation_spans)


class ChatTemplateError(ValueError):
    """The template itself failed: its ``raise_exception`` (Gemma's "System role not supported"), a syntax
    error, a sandbox refusal (jinja2's TemplateError in transformers), or any Python error its expressions
    raise (``1/0``, ``range(10**9)``, an ``{% import %}`` with no loader, recursion, memory)."""


def read_chat_template(folder: Path, config: Mapping[str, Any]) -> ChatTemplate | None:
    """A Hugging Face folder's chat template(s): the ``.jinja`` files when there are any (transformers lets
    them override the config), else the config's ``chat_template``; None when it has neither."""
    files = {"default": folder / CHAT_TEMPLATE_FILE} if (folder / CHAT_TEMPLATE_FILE).is_file() else {}
    if (folder / CHAT_TEMPLATE_DIR).is_dir():
        named = sorted((folder / CHAT_TEMPLATE_DIR).glob("*.jinja"))
        files |= {file.name.removesuffix(".jinja"): file for file in named}
    if files:
        named = {name: file.read_text(encoding="utf-8") for name, file in files.items()}
        return named["default"] if list(named) == ["default"] else named
    value = config.get("chat_template")
    if isinstance(value, list) and all(isinstance(t, Mapping) and isinstance(t.get("name"), str)
                                       and isinstance(t.get("template"), str) for t in value):
        return {t["name"]: t["template"] for t in value}
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{folder / 'tokenizer_config.json'}: chat_template must be a string or a list of "
                     f"{{\"name\": ..., \"template\": ...}}, got {type(value).__name__}")


def check_messages(messages: Any, where: str = "messages") -> list[dict[str, Any]]:
    """``messages`` as a chat: a non-empty list of {"role": one of MESSAGE_ROLES, "content": text, ...}; keys
    whose value is null are dropped, as transformers drops them. Anything else raises naming ``where``."""
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{where} must be a non-empty list of {{\"role\": ..., \"content\": ...}} messages, "
                         f"got {_short(messages)}")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ValueError(f"{where}[{i}] must be an object with role and content, got {_short(message)}")
        if message.get("role") not in MESSAGE_ROLES:
            raise ValueError(f"{where}[{i}].role must be one of {', '.join(MESSAGE_ROLES)}, "
                             f"got {message.get('role')!r}")
        if not isinstance(message.get("content"), str):
            raise ValueError(f"{where}[{i}].content must be text, got {_short(message.get('content'))}")
    return [{k: v for k, v in m.items() if v is not None} for m in messages]


def render_chat(template: ChatTemplate, messages: list[dict[str, Any]], tokens: Mapping[str, str | None], *,
                add_generation_prompt: bool | None = None, continue_final_message: bool = False,
                tools: list[dict[str, Any]] | None = None) -> str:
    """The text ``template`` makes of ``messages`` (checked by :func:`check_messages`), with the special
    tokens ``tokens`` (role -> text: ``{"bos": "<s>", ...}``) as ``bos_token`` ... variables.
    ``add_generation_prompt`` defaults to true unless ``continue_final_message`` (the text then ends inside
    the last message, module docstring); asking for both is refused, as transformers refuses it."""
    import jinja2

    source = _default_of(template)
    if continue_final_message:
        if add_generation_prompt:
            raise ValueError("continue_final_message and add_generation_prompt cannot both be set: the first "
                             "ends the text inside the last message, the second after it with a new "
                             "assistant header")
        if "content" not in source:
            raise ValueError("continue_final_message: the chat template never reads a message's 'content'")
        final = messages[-1]["content"]
        messages = [*messages[:-1], {**messages[-1], "content": final + CONTINUE_TAG}]
    specials = {f"{role}_token": text for role, text in tokens.items() if text is not None}
    try:
        text = _compile(source).render(messages=messages, tools=tools, documents=None,
                                       add_generation_prompt=not continue_final_message
                                       if add_generation_prompt is None else add_generation_prompt,
                                       **specials)
    except jinja2.TemplateError as e:  # raise_exception(...), a sandbox refusal
        raise ChatTemplateError(f"chat template: {e.message or type(e).__name__}") from None
    except Exception as e:  # the template's own Python error: 1/0, range(10**9), {% import %}, deep recursion
        raise ChatTemplateError(f"chat template failed: {type(e).__name__}: {e}") from None
    return _cut_after(text, final) if continue_final_message else text


def generation_spans(template: ChatTemplate, messages: list[dict[str, Any]],
                     tokens: Mapping[str, str | None], *,
                     tools: list[dict[str, Any]] | None = None) -> tuple[str, list[tuple[int, int]]] | None:
    """The text of ``messages`` (no generation prompt) and the character spans its ``{% generation %}``
    blocks wrote, in order (what transformers' ``return_assistant_tokens_mask`` marks); None when the
    template has no such block."""
    source = _default_of(template)
    if "generation" not in source or "endgeneration" not in source:
        return None
    specials = {f"{role}_token": text for role, text in tokens.items() if text is not None}
    try:
        marked = _compile(source, marks=True).render(messages=messages, tools=tools, documents=None,
                                                      add_generation_prompt=False, **specials)
    except Exception as e:  # as render_chat: the template's own failure
        raise ChatTemplateError(f"chat template failed: {type(e).__name__}: {e}") from None
    text, spans, start = [], [], None
    for i, piece in enumerate(marked.split(GENERATION_MARK)):
        if i:
            length = sum(map(len, text))
            if start is None:
                start = length
            else:
                spans.append((start, length))
                start = None
        text.append(piece)
    return "".join(text), spans


def _cut_after(text: str, final: str) -> str:
    """``text`` up to where the final message's text (rendered with CONTINUE_TAG after it) ends."""
    marker = CONTINUE_TAG.rstrip()
    if final.strip() not in text or marker not in text:
        raise ValueError("continue_final_message: the chat template does not write the final message's text "
                         f"as it is, so the text cannot end inside it (final message: {final.strip()!r})")
    at = text.rindex(marker)
    return text[:at] if text.startswith(CONTINUE_TAG, at) else text[:at].rstrip()


def read_messages(path: str | Path, where: str) -> list[dict[str, Any]]:
    """A conversation from a JSON file (a list of messages), checked; ``where`` names the option."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ValueError(f"{where}={str(path)!r} cannot be read: {e.strerror or e}.") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{where}={str(path)!r} is not JSON: {e}.") from None
    return check_messages(data, where=f"{where}={str(path)!r}")


def named_template(template: ChatTemplate, name: str) -> str:
    """The template called ``name`` among a folder's named ones (one template is only "default")."""
    named = {"default": template} if isinstance(template, str) else template
    if name not in named:
        raise ValueError(f"chat template {name!r}: this tokenizer's templates are {sorted(named)}")
    return named[name]


def _default_of(template: ChatTemplate) -> str:
    if isinstance(template, str):
        return template
    if "default" not in template:
        raise ValueError(f"chat template: named templates {sorted(template)} and no 'default' one")
    return template["default"]


def _short(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


@lru_cache(maxsize=16)
def _compile(source: str, marks: bool = False) -> Any:
    """A template compiled in an environment with transformers' rules (module docstring); ``marks``: its
    ``{% generation %}`` blocks wrapped in GENERATION_MARK (generation_spans)."""
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):  # {% generation %}...{% endgeneration %} marks assistant text; renders as is
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return f"{GENERATION_MARK}{caller()}{GENERATION_MARK}" if marks else caller()

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:  # jinja's own escapes HTML characters; this does not
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    class Namespace(jinja2.utils.Namespace):  # no underscore names: nothing reaches Python internals
        def __init__(*args: Any, **kwargs: Any) -> None:
            self, attrs = args[0], dict(*args[1:], **kwargs)
            for name in attrs:
                Namespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            Namespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} starts with '_'")

    class Dict:  # dict(...) and dict.fromkeys(...) only
        def __call__(self, *args: Any, **kwargs: Any) -> dict:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any) -> dict:
            return dict.fromkeys(*args)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=lambda f: datetime.now().strftime(f),
                       namespace=Namespace, dict=Dict())
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"chat template: line {e.lineno}: {e.message}") from None
