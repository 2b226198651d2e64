"""zoo: a configurable Transformer model zoo. `zoo.build(...)` turns one config into an encoder, a
decoder or an encoder-decoder; presets live in `conf/model/*.yaml`."""

import zoo.hydra_schema  # noqa: F401  (Hydra sees ModelConfig as model/_schema, which every preset lists)
from zoo.config import ModelConfig
from zoo.embedding import embed, load_embedder
from zoo.export import export
from zoo.inspection import parameter_table, trace
from zoo.loader import load
from zoo.models import ModelOutput
from zoo.presets import build, list_models, register_model, resolve_config
from zoo.pretrained import from_pretrained, save_pretrained
from zoo.quantization import quantize

__all__ = ["export", "load", "ModelConfig", "ModelOutput", "build", "list_models", "register_model", "resolve_config", "from_pretrained", "save_pretrained", "trace", "parameter_table", "quantize", "embed", "load_embedder"]
__version__ = "0.1.0"
