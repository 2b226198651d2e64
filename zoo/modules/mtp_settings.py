"""The keys of `model.mtp`, multi-token prediction (zoo.modules.mtp builds it; null: none):

    mtp: {name: sequential, depth: 1, weight: 0.3}      # DeepSeek-V3 (num_nextn_predict_layers: 1)

Pure data (no torch); what the keys say with the rest of the config (a decoder with an LM head) is checked
by zoo.modules.mtp.check_config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from zoo.options import integer, number
from zoo.parts import Part, Parts

MTP = Parts("mtp", default="sequential")


@MTP.register("sequential")
@dataclass(frozen=True)
class SequentialMTPSettings(Part):
    """DeepSeek-V3's modules in a chain: module k predicts the token k + 1 places past the next one from the
    previous module's hidden state (the main model's for k = 1) and the embedding of the token k places on,
    through one more layer of the stack, and shares the model's token table and output head."""

    depth: Annotated[int, integer(1, 16)] = 1  # modules (tokens predicted beyond the next one)
    weight: Annotated[float, number(0.0)] = 0.3  # training loss += weight * mean over modules of their CE
