"""Real chat templates as shipped in Hugging Face folders (tokenizer_config.json's ``chat_template``), kept as
data for tests/tokenizers/test_chat.py, with the special tokens each family's folder names.

Each :class:`Family` gives the template text, the config's role -> token, the added special tokens the
template writes, and whether the folder's ``tokenizer.json`` puts BOS before a text (Llama, Gemma, Mistral
do: the rendered chat already starts with BOS, which must not be doubled)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).parent / "templates"  # the long templates, as .jinja files are shipped


def _shipped(name: str) -> str:
    return (HERE / f"{name}.jinja").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Family:
    name: str
    template: str
    roles: dict[str, str | None]  # bos/eos/unk/pad -> token text, as tokenizer_config.json names them
    added: tuple[str, ...] = ()  # special tokens the template writes (besides the roles')
    prepends_bos: bool = False  # tokenizer.json's post-processor adds BOS (add_special_tokens=True)
    extra: dict[str, str] = field(default_factory=dict)


# meta-llama/Meta-Llama-3-8B-Instruct
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)

# meta-llama/Llama-3.2-3B-Instruct (the Llama 3.1 date logic, with strftime_now when it is there)
LLAMA32 = _shipped("llama3.2")

# Qwen/Qwen2.5-7B-Instruct (the tools branches are in the template; these tests pass no tools)
QWEN25 = _shipped("qwen2.5")

# google/gemma-2-2b-it (no system role: raise_exception)
GEMMA = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)

# google/gemma-3-4b-it (a system message becomes the first user turn's prefix; text or image content)
GEMMA3 = _shipped("gemma3")

# Qwen/Qwen3-8B (reasoning_content as <think>, kept only after the last user query; tools)
QWEN3 = _shipped("qwen3")

# mistralai/Mistral-7B-Instruct-v0.1 ([INST] as text; only user and assistant)
MISTRAL = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)

# mistralai/Mistral-Nemo-Instruct-2407 ([INST] as special tokens; namespace, selectattr, a system message)
MISTRAL_NEMO = _shipped("mistral-nemo")

# microsoft/Phi-3.5-mini-instruct (eos_token when there is no generation prompt)
PHI3 = (
    "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
    "{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}"
    "{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}"
    "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
)

# HuggingFaceTB/SmolLM2-135M-Instruct (ChatML with a default system message)
SMOLLM = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
    "trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

LLAMA_ROLES = {"bos": "<|begin_of_text|>", "eos": "<|eot_id|>"}
LLAMA_ADDED = ("<|start_header_id|>", "<|end_header_id|>")
FAMILIES = [
    Family("llama3", LLAMA3, LLAMA_ROLES, LLAMA_ADDED, prepends_bos=True),
    Family("llama3.2", LLAMA32, LLAMA_ROLES, LLAMA_ADDED, prepends_bos=True),
    Family("qwen2.5", QWEN25, {"bos": None, "eos": "<|im_end|>", "pad": "<|endoftext|>"}, ("<|im_start|>",)),
    Family("gemma", GEMMA, {"bos": "<bos>", "eos": "<eos>", "pad": "<pad>", "unk": "<unk>"},
           ("<start_of_turn>", "<end_of_turn>"), prepends_bos=True),
    Family("gemma3", GEMMA3, {"bos": "<bos>", "eos": "<eos>", "pad": "<pad>", "unk": "<unk>"},
           ("<start_of_turn>", "<end_of_turn>"), prepends_bos=True),
    Family("qwen3", QWEN3, {"bos": None, "eos": "<|im_end|>", "pad": "<|endoftext|>"},
           ("<|im_start|>", "<think>", "</think>")),
    Family("mistral", MISTRAL, {"bos": "<s>", "eos": "</s>", "unk": "<unk>"}, prepends_bos=True),
    Family("mistral-nemo", MISTRAL_NEMO, {"bos": "<s>", "eos": "</s>", "unk": "<unk>"}, ("[INST]", "[/INST]"),
           prepends_bos=True),
    Family("phi3", PHI3, {"bos": "<s>", "eos": "<|endoftext|>", "unk": "<unk>"},
           ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")),
    Family("smollm", SMOLLM, {"bos": "<|im_start|>", "eos": "<|im_end|>", "pad": "<|im_end|>"}),
]
