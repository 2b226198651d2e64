"""Imports every family module so each registers itself in FAMILIES."""

from zoo.pretrained import bert, gpt2, llama  # noqa: F401
