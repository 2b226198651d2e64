"""Imports every family module so each registers itself in FAMILIES."""

from zoo.pretrained import gpt2  # noqa: F401
