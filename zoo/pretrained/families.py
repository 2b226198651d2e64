"""Imports every family module so each registers itself in FAMILIES."""

from zoo.pretrained import (  # noqa: F401
    bart,
    bert,
    distilbert,
    gemma,
    gemma2,
    gpt2,
    gpt_neox,
    llama,
    marian,
    mistral,
    opt,
    phi3,
    qwen2,
    qwen3,
    roberta,
    t5,
)
