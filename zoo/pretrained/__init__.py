"""Hugging Face checkpoints in and out: `from_pretrained(dir)` and `save_pretrained(model, dir)`."""

from zoo.pretrained.api import from_pretrained, load_config, save_pretrained
from zoo.pretrained.family import FAMILIES

__all__ = ["FAMILIES", "from_pretrained", "load_config", "save_pretrained"]
