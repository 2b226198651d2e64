"""Builders: the three architectures, each registered in ARCHS under its `arch` name."""

from zoo.models.base import ARCHS, ModelOutput, ZooModel, build_model, check_config
from zoo.models.decoder import DecoderLM
from zoo.models.encoder import EncoderModel
from zoo.models.encoder_decoder import EncoderDecoder
from zoo.models.mlp_lm import MLPLanguageModel

__all__ = ["ARCHS", "ModelOutput", "ZooModel", "build_model", "check_config", "DecoderLM", "EncoderModel",
           "EncoderDecoder", "MLPLanguageModel"]
