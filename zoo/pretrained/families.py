"""Imports every family module so each registers itself in FAMILIES."""

import zoo.pretrained.bart  # noqa: F401
import zoo.pretrained.bert  # noqa: F401
import zoo.pretrained.distilbert  # noqa: F401
import zoo.pretrained.gemma  # noqa: F401
import zoo.pretrained.gemma2  # noqa: F401
import zoo.pretrained.gpt2  # noqa: F401
import zoo.pretrained.gpt_neox  # noqa: F401
import zoo.pretrained.llama  # noqa: F401
import zoo.pretrained.marian  # noqa: F401
import zoo.pretrained.mistral  # noqa: F401
import zoo.pretrained.opt  # noqa: F401
import zoo.pretrained.phi3  # noqa: F401
import zoo.pretrained.qwen2  # noqa: F401
import zoo.pretrained.qwen3  # noqa: F401
import zoo.pretrained.roberta  # noqa: F401
import zoo.pretrained.t5  # noqa: F401
