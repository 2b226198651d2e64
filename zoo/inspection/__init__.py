"""Opening the black box: shape trace of a forward pass, attention maps and their pictures, parameter and
FLOP counts, and a Lightning callback that logs attention maps during validation. See docs/inspection.md."""

from zoo.inspection.attention import AttentionMaps, attention_maps
from zoo.inspection.counts import FlopCount, flops_per_token, flops_table, parameter_counts, parameter_table
from zoo.inspection.trace import Record, Trace, Tracer, trace

__all__ = [
    "AttentionMaps", "FlopCount", "Record", "Trace", "Tracer", "attention_maps", "flops_per_token",
    "flops_table", "parameter_counts", "parameter_table", "trace",
]
