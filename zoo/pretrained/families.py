"""Imports every family module so each registers itself in FAMILIES."""

from zoo.pretrained import bart, bert, gpt2, llama, marian  # noqa: F401
from zoo.pretrained import mistral, phi3, qwen2, qwen3  # noqa: F401
from zoo.pretrained import gpt_neox, opt  # noqa: F401
from zoo.pretrained import gemma, gemma2  # noqa: F401
from zoo.pretrained import t5  # noqa: F401
from zoo.pretrained import distilbert, roberta  # noqa: F401
