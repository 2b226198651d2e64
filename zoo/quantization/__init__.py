"""Weight-only quantisation of a model for CPU decoding: `zoo.quantize(model, "int8")` or
`zoo.quantize(model, "int4", group_size=64)`. A decode step reads every weight once per token, so on a CPU it
is bound by bytes read: int8 moves a quarter of fp32's bytes, int4 an eighth (plus its scales). Layers run
on torch's fused CPU kernels (linear.py says why through bf16); the methods are a registry (methods.py);
docs/quantization.md has the measurements behind the defaults."""

from zoo.quantization.api import check_quantize, float_state_dict, quantize
from zoo.quantization.embedding import QuantizedEmbedding
from zoo.quantization.linear import Int4Linear, Int8Linear, QuantizedLinear
from zoo.quantization.methods import QUANTIZERS, Int4Settings, Int8Settings, QuantizationMethod

__all__ = ["QUANTIZERS", "Int4Linear", "Int4Settings", "Int8Linear", "Int8Settings", "QuantizationMethod",
           "QuantizedEmbedding", "QuantizedLinear", "check_quantize", "float_state_dict", "quantize"]
