"""`zoo.export(ckpt, dir, format=...)`: a training checkpoint (or a zoo export) written as a folder in one of
the registered formats (`FORMATS`: zoo, hf, gguf; one module each). The folder is published with zoo.atomic's
protocol: built beside the target and swapped in whole, so it holds the complete old export or the complete
new one at every moment. LoRA adapters of a fine-tuning checkpoint are merged into the weights."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import zoo.export.gguf  # noqa: F401  (registers format gguf)
import zoo.export.hf  # noqa: F401  (registers format hf)
import zoo.export.native  # noqa: F401  (registers format zoo)
from zoo.export.registry import FORMATS
from zoo.export.run import export

__all__ = ["FORMATS", "export"]


class _CallableModule(types.ModuleType):
    """`zoo.export` names both this package and its function: importing the package rebinds `zoo.export` to
    the package, so the package calls the function."""

    def __call__(self, *args: Any, **kwargs: Any) -> Path:
        return export(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
