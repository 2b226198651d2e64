"""Output heads, one registered class per `model.head` value (HEADS): lm, none, classifier,
token_classifier, qa. Each answers for its config keys, tensors, outputs, targets and loss (base.py)."""

from zoo.modules.heads.bare import BareHead
from zoo.modules.heads.base import (
    HEADS,
    HeadOutput,
    OutputHead,
    check_label_range,
    masked_mean_ce,
    register_head,
)
from zoo.modules.heads.classifier import ClassifierHead, TokenClassifierHead
from zoo.modules.heads.lm import LMHead, lm_loss
from zoo.modules.heads.pooling import NO_POOLER, POOLINGS, PoolingHead, pool_first, pool_last, pooler_names
from zoo.modules.heads.qa import QuestionAnsweringHead

__all__ = ["HEADS", "BareHead", "ClassifierHead", "HeadOutput", "LMHead", "NO_POOLER", "OutputHead",
           "POOLINGS", "PoolingHead", "QuestionAnsweringHead", "TokenClassifierHead", "check_label_range",
           "lm_loss", "masked_mean_ce", "pool_first", "pool_last",
           "pooler_names", "register_head"]
