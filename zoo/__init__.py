"""zoo: a configurable Transformer model zoo. `zoo.build(...)` turns one config into an encoder, a
decoder or an encoder-decoder; presets live in `conf/model/*.yaml`.

The names below load on first use (PEP 562), so `import zoo` costs no Hydra, Lightning or pretrained
family; each name's module is imported the first time the name is read."""

from importlib import import_module
from importlib.util import find_spec
from typing import Any

_HOMES = {  # public name -> the module that defines it
    "export": "zoo.export", "load": "zoo.loader", "ModelConfig": "zoo.config", "ModelOutput": "zoo.models",
    "build": "zoo.presets", "list_models": "zoo.presets", "register_model": "zoo.presets",
    "resolve_config": "zoo.presets", "from_pretrained": "zoo.pretrained", "save_pretrained": "zoo.pretrained",
    "trace": "zoo.inspection", "parameter_table": "zoo.inspection", "quantize": "zoo.quantization",
    "embed": "zoo.embedding", "load_embedder": "zoo.embedding",
}
__all__ = list(_HOMES)
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """A public name: import its module on first access and keep the name here. A subpackage
    (`zoo.pretrained.load_config` after a plain `import zoo`): import it, as an eager facade did."""
    if name in _HOMES:
        value = globals()[name] = getattr(import_module(_HOMES[name]), name)
        return value
    if not name.startswith("_") and find_spec(f"zoo.{name}") is not None:
        return import_module(f"zoo.{name}")
    raise AttributeError(f"module 'zoo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
