"""What every zoo architecture shares: the output record, input checks, position ids and weight init."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from zoo.config import ModelConfig
from zoo.models.size import check_fits
from zoo.models.vocabulary import ARCHS, check_config
from zoo.modules.block import Stack
from zoo.modules.cache import KVCache
from zoo.modules.embedding import Embeddings
from zoo.modules.heads import HEADS, HeadOutput, OutputHead
from zoo.modules.mask import (
    AttentionMask,
    build_mask,
    check_document_order,
    check_documents,
    document_positions,
)
from zoo.modules.mixers import mixers_of
from zoo.modules.mtp import check_config as check_mtp
from zoo.modules.positional import Positional, PositionTerms
from zoo.utils import check_range


@dataclass
class ModelOutput:
    """Hugging Face-style result: what the head gives (`.logits`: None for head=none), `.loss` only when
    targets were given, the last hidden states and, with output_hidden_states=True, every layer's."""

    logits: torch.Tensor | None
    loss: torch.Tensor | None = None
    hidden_states: torch.Tensor | None = None  # last layer output (B, T, C), after the final norm if any
    attentions: list = field(default_factory=list)  # self-attention weights per layer (need_weights=True)
    cross_attentions: list = field(default_factory=list)
    encoder_hidden_states: torch.Tensor | None = None  # encoder_decoder: the encoder's last output (memory)
    encoder_attentions: list = field(default_factory=list)
    cache: KVCache | None = None
    # output_hidden_states=True: n_layers + 1 tensors (B, T, C) as transformers' `hidden_states`:
    # the embedding output, then each layer's output, the last one after the final norm
    # (GPT-2's ln_f, Llama's norm)
    all_hidden_states: tuple[torch.Tensor, ...] | None = None
    encoder_all_hidden_states: tuple[torch.Tensor, ...] | None = None  # encoder_decoder: the encoder's, alike
    pooler_output: torch.Tensor | None = None  # head=none with a pooler (B, C)
    # model.mtp, while training (or output_mtp=True): each multi-token-prediction module's normed output
    # (B, T, C), for the model's head; module k at position t predicts token t + k + 1
    mtp_hidden_states: tuple[torch.Tensor, ...] | None = None
    start_logits: torch.Tensor | None = None  # head=qa (B, T)
    end_logits: torch.Tensor | None = None  # head=qa (B, T)

    @property
    def last_hidden_state(self) -> torch.Tensor | None:
        """transformers' name for `hidden_states` (the last layer's output)."""
        return self.hidden_states


class ZooModel(nn.Module):
    """Base class: holds the config, validates inputs before compute, initialises weights GPT-2 style."""

    self_stream = "decoder"  # the stack whose self-attention `ModelOutput.attentions` reports
    is_encoder_decoder = False  # takes a source (input_ids) and a target (decoder_input_ids)
    causal_lm = False  # a decoder-only next-token model with a KV cache (what serving and lm-eval score)
    bidirectional = False  # has a stack whose tokens see the whole sequence (an encoder)
    # True while a caller checks every batch's values on the host before they move to the device (the training
    # module does, with `check_values`): forward then skips its value checks (token ids and labels in range,
    # document ids in order), each a device->host sync per call on a GPU and a graph break when compiled
    inputs_checked_on_host = False
    # built from the shared attention stack, so every attention/FFN/positional knob applies
    transformer = True
    carries_mtp = False  # builds model.mtp's multi-token-prediction modules (a decoder's own sequence)
    # the Hugging Face model_type the weights came from (from_pretrained, init_from, a checkpoint of such a
    # run): export format=hf writes that family back by default; None for a model zoo built
    pretrained_family: str | None = None

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        check_config(config)
        self.config = config

    @classmethod
    def check_config(cls, cfg: ModelConfig) -> None:
        """What this architecture needs of the config (called by `check_config` through ARCHS)."""
        cls.check_depth(cfg)
        cls.check_head(cfg)
        check_mtp(cfg, cls.carries_mtp)
        for key, name, mixer in mixers_of(cfg):
            if cls.bidirectional and getattr(mixer, "causal_only", False):
                raise ValueError(f"{key}={name} reads the tokens left to right only, and arch={cfg.arch!r} "
                                 "has a bidirectional (encoder) stack: use arch=decoder, or "
                                 f"{key}=attention.")

    @classmethod
    def check_depth(cls, cfg: ModelConfig) -> None:
        """One stack: its depth is model.n_layers."""
        for key in ("encoder_layers", "decoder_layers"):
            if getattr(cfg, key) is not None:
                raise ValueError(f"model.{key}={getattr(cfg, key)} applies to arch 'encoder_decoder' only; "
                                 f"arch {cfg.arch!r} takes its depth from model.n_layers.")

    @classmethod
    def depth(cls, cfg: ModelConfig) -> tuple[int, str]:
        """The number of blocks `cfg` builds and the keys that set it, as the user wrote them."""
        return (cfg.n_layers, f"model.n_layers={cfg.n_layers}") if cls.transformer else (0, "")

    @classmethod
    def least_parameters(cls, cfg: ModelConfig) -> int:
        """A lower bound on the weights `cfg` builds, from its sizes alone: the token table, and each block's
        query and output projections (every block has them)."""
        blocks, _ = cls.depth(cfg)
        return cfg.vocab_size * cfg.d_model + blocks * 2 * cfg.d_model * cfg.n_heads * cfg.head_size

    # the model.head values this architecture carries (zoo.modules.heads.HEADS); None: every registered head
    heads: tuple[str, ...] | None = ("lm",)

    @classmethod
    def check_head(cls, cfg: ModelConfig) -> None:
        """The head is one this architecture carries (the head checks its own keys, through HEADS)."""
        if cls.heads is not None and cfg.head.name not in cls.heads:
            every = [n for n in ARCHS if ARCHS.get(n).heads is None]
            raise ValueError(f"model.head={cfg.head.name!r} is not available on arch {cfg.arch!r}, which "
                             "carries "
                             f"model.head={' | '.join(cls.heads)}; every head ({', '.join(HEADS)}) needs "
                             f"model.arch={' | '.join(every)}.")

    @property
    def positions(self) -> Positional:
        """The positional scheme of the stream this model outputs (the decoder's for encoder-decoder)."""
        return self.embed.positional

    @property
    def decoder_embed(self) -> Embeddings:
        """The embeddings of the stream that decoding extends (a compiled decode step embeds through it)."""
        return self.embed

    # ----- input checks (clear errors instead of device-side asserts) -----
    def check_ids(self, ids: torch.Tensor, name: str = "input_ids") -> None:
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype not in (torch.long, torch.int):
            got = f"{tuple(ids.shape)} {ids.dtype}" if isinstance(ids, torch.Tensor) else type(ids).__name__
            raise ValueError(f"{name} must be an integer tensor of shape (batch, seq_len), got {got}.")
        if ids.shape[1] == 0:
            raise ValueError(f"{name} is empty (seq_len 0); give at least one token.")
        if not self.inputs_checked_on_host:
            self.check_id_range(ids, name)

    def check_id_range(self, ids: torch.Tensor, name: str = "input_ids") -> None:
        """Token ids within the vocabulary (one ValueError naming the range found and the one allowed)."""
        v = self.config.vocab_size
        check_range(ids, v, lambda lo, hi: f"{name} holds token ids in [{lo}, {hi}] but the vocabulary is "
                                            f"[0, {v}) (model.vocab_size={v}).")

    @property
    def label_classes(self) -> int | None:
        """How many values a label may take, as the head says: the vocabulary (lm), num_labels (classifiers);
        None where targets are not class ids (qa positions) or there are none (head=none)."""
        return type(self.head).label_classes(self.config)

    def check_labels(self, labels: torch.Tensor, shape: tuple[int, ...], name: str = "labels") -> None:
        """A target is an integer tensor of the head's shape whose values the head allows (class ids in
        [0, label_classes) or -100); anything else would be a deep IndexError on CPU and a device-side assert
        on GPU."""
        if (not isinstance(labels, torch.Tensor) or labels.is_floating_point()
                or tuple(labels.shape) != tuple(shape)):
            got = (f"{tuple(labels.shape)} {labels.dtype}" if isinstance(labels, torch.Tensor)
                   else type(labels).__name__)
            raise ValueError(f"{name} must be an integer tensor of shape {tuple(shape)}, got {got}.")
        if not self.inputs_checked_on_host:
            type(self.head).check_target_values(self.config, {name: labels})

    def check_values(self, batch: Mapping[str, torch.Tensor]) -> None:
        """Every value check forward makes, on a whole batch (call it on the host, before the transfer, with
        `inputs_checked_on_host` set): token ids in the vocabulary, the head's targets (and a causal LM's
        `targets`) as the head allows, document ids in order. Keys absent from the batch are skipped."""
        for name in ("input_ids", "decoder_input_ids"):
            if isinstance(batch.get(name), torch.Tensor):
                self.check_id_range(batch[name], name)
        names = dict.fromkeys(("labels", "targets", *self.head.targets))
        targets = {name: batch[name] for name in names if isinstance(batch.get(name), torch.Tensor)}
        type(self.head).check_target_values(self.config, targets)
        if isinstance(batch.get("document_ids"), torch.Tensor):
            check_document_order(batch["document_ids"])

    # ----- the output head (zoo.modules.heads) -----
    def build_head(self, tokens: nn.Embedding, *, causal: bool) -> OutputHead:
        """The head model.head names, over a `causal` stack or not (which sets the pooling heads'
        defaults)."""
        return HEADS.get(self.config.head.name)(self.config, tokens, causal=causal)

    def apply_head(
        self, x: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
        targets: Mapping[str, torch.Tensor | None], *, shift: bool, logits_to_keep: int = 0,
    ) -> tuple[HeadOutput, torch.Tensor | None]:
        """x (B, T, C) -> the head's outputs and, when its targets are given (all of them), its loss.
        `targets`: every target keyword the forward takes (None: not given); a target of another head is
        refused, naming what this head takes."""
        given = {name: value for name, value in targets.items() if value is not None}
        takes = self.head.targets
        for name in given:
            if name not in takes:
                wanted = ", ".join(takes) if takes else "no targets (a bare model gives hidden states)"
                raise ValueError(f"{name} is not a target of "
                                 f"model.head={self.config.head.name}; it takes {wanted}.")
        if given and len(given) != len(takes):
            raise ValueError(f"model.head={self.config.head.name} needs {' and '.join(takes)} together; got "
                             f"{', '.join(given)} only.")
        out = self.head.outputs(x, input_ids, attention_mask, logits_to_keep)
        if not given:
            return out, None
        shape = type(self.head).target_shape(tuple(input_ids.shape))
        for name, value in given.items():
            self.check_labels(value, shape, name)
        return out, self.head.loss(out, given, shift=shift)

    @staticmethod
    def check_mask(attention_mask: torch.Tensor | None, batch: int, length: int,
                   name: str = "attention_mask") -> None:
        """A padding mask is (batch, keys): one entry per visible position (past + new with a cache)."""
        if attention_mask is not None and tuple(attention_mask.shape) != (batch, length):
            raise ValueError(
                f"{name} has shape {tuple(attention_mask.shape)} but must be ({batch}, {length}): "
                f"(batch, positions so far incl. any cached ones), 1 = real token, 0 = padding."
            )

    def position_ids(
        self, embed: Embeddings, ids: torch.Tensor, start: int, position_ids: torch.Tensor | None,
        name: str = "input_ids", attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The scheme's default positions (start..start+T-1) unless given (left-padded batches pass their
        own); the scheme checks them."""
        t = ids.shape[1]
        scheme = embed.positional
        if position_ids is None:
            scheme.check_span(start, t, name)
            return scheme.default_position_ids(ids, start, attention_mask)
        if position_ids.shape != ids.shape:
            raise ValueError(f"position_ids shape {tuple(position_ids.shape)} != {name} shape "
                             f"{tuple(ids.shape)}.")
        scheme.check_position_ids(position_ids)
        return position_ids

    def embed_and_mask(
        self,
        embed: Embeddings,
        ids: torch.Tensor,
        *,
        causal: bool,
        start: int = 0,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        name: str = "input_ids",
        document_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, AttentionMask, PositionTerms | None]:
        """The shared front of every stack: check ids, embed them at their positions (B, T, C), and build
        the self-attention mask and positional terms once for all layers. `document_ids` (B, T) marks packed
        documents: attention stays inside each one and positions restart at 0 for each (unless given)."""
        self.check_ids(ids, name)
        if document_ids is not None:
            for key, name, mixer in mixers_of(self.config):
                if not getattr(mixer, "packs_documents", True):
                    raise ValueError(f"{key}={name} carries one state along each row, so packed documents "
                                     "(document_ids; data.document_mask=true) would read each other: train "
                                     "it with data.document_mask=false.")
            if start:
                raise ValueError("document_ids mark packed documents of a "
                                 "whole row; they cannot continue a cache.")
            check_documents(document_ids, tuple(ids.shape), order=not self.inputs_checked_on_host)
        derived = document_ids is not None and position_ids is None
        if derived:  # (B, T), 0 at each document's first token: within 0..T-1 by construction
            embed.positional.check_span(0, ids.shape[1], name)
            position_ids = document_positions(document_ids)
        b, t = ids.shape
        mask_name = "decoder_attention_mask" if name == "decoder_input_ids" else "attention_mask"
        self.check_mask(attention_mask, b, start + t, mask_name)
        if token_type_ids is not None and embed.types is not None:
            if token_type_ids.shape != ids.shape:
                raise ValueError(f"token_type_ids shape {tuple(token_type_ids.shape)} != {name} shape "
                                 f"{tuple(ids.shape)}.")
            n = self.config.type_vocab_size
            check_range(token_type_ids, n, lambda lo, hi: f"token_type_ids hold types in [{lo}, {hi}] but "
                                                           f"model.type_vocab_size={n}.")
        pos = (position_ids if derived
               else self.position_ids(embed, ids, start, position_ids, name, attention_mask))
        x = embed(ids, pos, token_type_ids)  # (B, T, C)
        terms = embed.positional.terms(pos, start, start + t, causal=causal)
        mask = build_mask(
            self.padding_mask(attention_mask), causal=causal, q_len=t, k_len=start + t,
            bias=terms.bias if terms is not None else None,
            window=getattr(self.config.mixer, "sliding_window", None), documents=document_ids,
            window_only=not self.config.layer_pattern.uses("global"),
        )
        return x, mask, terms

    def padding_mask(self, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
        """None when nothing is masked, so attention can take the fused causal kernel. While inputs are
        checked on the host (training) the mask is kept as given: finding out would cost a device sync and,
        compiled, a graph break on every forward, and padded batches (the ones that carry a mask) rarely have
        none."""
        if attention_mask is None or (not self.inputs_checked_on_host and bool(attention_mask.all())):
            return None
        return attention_mask

    # ----- weights -----
    def init_weights(self) -> None:
        """N(0, init_std) for matrices and embeddings, zero biases; each stack's residual output projections
        (attention `o`, feed-forward `down`) scaled by 1/sqrt(2 * that stack's depth) so its residual stream's
        variance does not grow with depth: GPT-2's rule (c_proj: 1/sqrt(2 * n_layer), two residual additions
        per layer), counted over the layers that write to that stream. An encoder-decoder's two streams are
        separate, so each stack counts its own depth (a decoder layer's cross-attention `o` is scaled
        alike). On the meta device (shapes only) there is nothing to draw: skipped (a 30B MoE preset builds in
        seconds instead of minutes)."""
        if any(p.is_meta for p in self.parameters()):
            return
        std = self.config.init_std
        for module in self.modules():
            init_module(module, std)
        for stack in (m for m in self.modules() if isinstance(m, Stack)):
            residual_std = std / math.sqrt(2 * max(1, len(stack.layers)))
            for name, param in stack.named_parameters():
                if name.endswith(("o.weight", "down.weight")):
                    nn.init.normal_(param, 0.0, residual_std)

    def num_parameters(self) -> int:
        """Unique trainable parameters (tied tensors counted once)."""
        return sum(p.numel() for p in self.parameters())

    def generate(self, input_ids, **kwargs):
        """Decode from this model: see `zoo.generation.generate` (Hugging Face keyword names)."""
        from zoo.generation import generate  # late import: generation builds on the models

        return generate(self, input_ids, **kwargs)

    def new_cache(self) -> KVCache:
        """An empty KV cache for this model's (decoder) layers."""
        if not hasattr(self, "decoder_stack"):
            raise ValueError(f"model.arch={self.config.arch!r} has no decoder: a KV cache serves decoding "
                             "(arch decoder or encoder_decoder).")
        return KVCache(len(self.decoder_stack.layers))


def init_module(module: nn.Module, std: float) -> None:
    """zoo's draw for one module's own tensors: N(0, std) for a linear or embedding weight, zero bias (the
    residual projections' depth scaling is ZooModel.init_weights's, over whole stacks)."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, 0.0, std)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def build_model(cfg: ModelConfig) -> ZooModel:
    """The architecture `cfg.arch` built from `cfg`, after every named choice has been checked."""
    check_config(cfg)
    check_fits(cfg)
    return ARCHS.get(cfg.arch)(cfg)
