"""Data sources: a name in ``data.name`` maps to a loader returning a split corpus.

Built-in sources need no download: ``stdlib_text`` (the interpreter's own ``.py`` files) and
``translation_toy`` (a seeded Korean->English template set). ``text``, ``pairs`` and
``classification`` read local user files, ``token_tags`` (NER) and ``squad`` (extractive QA) local JSONL;
``hf`` (optional) reads a ``datasets`` dataset for any task.
Importing this package registers all of them.
"""

from zoo.data.sources import (  # noqa: F401  (registers them)
    chat,
    hf,
    preference,
    prompts,
    squad,
    stdlib,
    token_tags,
    translation,
    user,
)
from zoo.data.sources.base import SOURCES, load_source, register_source

__all__ = ["SOURCES", "load_source", "register_source"]
