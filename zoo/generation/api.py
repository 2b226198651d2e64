"""`generate(model, input_ids, ...)`: validate, build the stepper for the model's architecture, run greedy,
sampling or beam search, and return sequences (or a GenerateOutput with scores and per-step logits)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from zoo.generation.beam import beam_search
from zoo.generation.config import GenerationConfig
from zoo.generation.greedy_sample import greedy_or_sample
from zoo.generation.mtp_draft import SELF_DRAFT, check_self_draft, mtp_speculative_decode
from zoo.generation.prompts import PromptLike, align, as_batch
from zoo.generation.speculative import check_assistant, speculative_decode
from zoo.generation.static import StaticStepper, check_static
from zoo.generation.stepper import DecoderStepper, EncoderDecoderStepper, Stepper
from zoo.generation.stopping import StopStrings
from zoo.registry import Registry
from zoo.utils import eval_mode

STEPPERS: Registry = Registry("generation architecture")


@STEPPERS.register("mlp_lm")  # no KV cache: each step re-reads its last context_size tokens
@STEPPERS.register("decoder")
def _decoder_stepper(model, ids: torch.Tensor, mask: torch.Tensor, pad_id: int, use_cache: bool) -> Stepper:
    ids, mask = align(ids, mask, pad_id, side="left")  # new tokens go right after every prompt
    return DecoderStepper(model, ids, mask, use_cache)


@STEPPERS.register("encoder_decoder")
def _encoder_decoder_stepper(model, ids: torch.Tensor, mask: torch.Tensor, pad_id: int,
                             use_cache: bool) -> Stepper:
    ids, mask = align(ids, mask, pad_id, side="right")  # the encoder numbers source positions from 0
    return EncoderDecoderStepper(model, ids, mask, use_cache)


@dataclass
class GenerateOutput:
    """`sequences` (N, L): decoder = prompt + new tokens (left-padded prompts), encoder-decoder = start
    token + target; finished rows padded with pad_id. Beam search fills `scores` (N,), the
    length-normalised log-probabilities; greedy / sampling fill `logits`, the raw (N, V) logits per step."""

    sequences: torch.Tensor
    scores: torch.Tensor | None = None
    logits: list[torch.Tensor] = field(default_factory=list)
    acceptance_rate: float | None = None  # speculative decoding: accepted / proposed draft tokens


def generate(
    model, input_ids: PromptLike, attention_mask: torch.Tensor | None = None, *, assistant_model=None,
    stop_strings: str | list[str] | None = None, tokenizer=None, **kwargs: Any,
) -> torch.Tensor | GenerateOutput:
    """Continue prompts (decoder) or translate sources (encoder-decoder). Options are GenerationConfig's
    fields (max_new_tokens, do_sample, temperature, top_k, top_p, num_beams, num_return_sequences,
    length_penalty, early_stopping, eos_token_id, pad_token_id, use_cache, seed, return_dict,
    cache_implementation, compile, num_assistant_tokens). `assistant_model`: a smaller decoder with the same
    vocabulary for speculative decoding: greedy output equals this model's greedy output, sampled tokens are
    distributed as this model's samples (zoo.generation.speculative); `"mtp"`: the model's own model.mtp
    modules draft min(num_assistant_tokens, depth) tokens a round (zoo.generation.mtp_draft). `stop_strings`
    with a `tokenizer` (its `decode` reads the new tokens): greedy / sampling rows stop once their new text
    contains one of them (zoo.generation.stopping; the stop string's tokens are kept, as Hugging Face does).

    Example: `model.generate(ids, max_new_tokens=20, do_sample=True, top_p=0.9, seed=0)`."""
    mcfg = model.config
    if mcfg.arch not in STEPPERS:
        raise ValueError("generate needs a decoder or encoder_decoder "
                         f"model; model.arch={mcfg.arch!r} cannot generate.")
    cfg = GenerationConfig.from_kwargs(**kwargs)
    cfg.validate(mcfg.vocab_size)
    name = "input_ids (source)" if model.is_encoder_decoder else "input_ids"
    ids, mask = as_batch(input_ids, attention_mask, mcfg.vocab_size, name=name)
    device = next(model.parameters()).device
    ids, mask = ids.to(device), mask.to(device)
    pad_id = mcfg.pad_id if cfg.pad_token_id is None else cfg.pad_token_id
    eos_ids = cfg.eos_ids(mcfg.eos_id)
    if isinstance(assistant_model, str):
        if assistant_model != SELF_DRAFT:
            raise ValueError(f"assistant_model={assistant_model!r}: a draft is a decoder model with this "
                             f"model's vocabulary, or {SELF_DRAFT!r} (the model's own model.mtp modules).")
        check_self_draft(model, ids.shape[0], int(mask.sum()), cfg.max_new_tokens, cfg)
    elif assistant_model is not None:
        check_assistant(model, assistant_model, ids.shape[0], int(mask.sum()), cfg.max_new_tokens, cfg)
    stop = _stop_strings(stop_strings, tokenizer, cfg, assistant_model)
    max_len = None
    if cfg.static_cache:  # every reason a static cache cannot serve this run, before the prompt is run
        max_len = check_static(model, ids.shape[1], cfg.max_new_tokens, use_cache=cfg.use_cache,
                               compile=cfg.compile)
    with eval_mode(model), torch.inference_mode():  # dropout off while decoding; the caller's mode comes back
        if assistant_model is None:
            out = _run(model, ids, mask, cfg, pad_id, eos_ids, max_len, stop)
        elif isinstance(assistant_model, str):  # SELF_DRAFT
            out = _run_speculative(model, None, ids, mask, cfg, eos_ids)
        else:
            with eval_mode(assistant_model):
                out = _run_speculative(model, assistant_model, ids, mask, cfg, eos_ids)
    return out if cfg.return_dict else out.sequences


def _run_speculative(model, draft, ids, mask, cfg: GenerationConfig, eos_ids: list[int]) -> GenerateOutput:
    """`draft` None: the model's own model.mtp modules draft (zoo.generation.mtp_draft)."""
    real = mask[0].bool()  # one prompt: decode its real tokens, put any padding back in front
    options = dict(eos_ids=eos_ids, num_draft=cfg.num_assistant_tokens, choice=cfg.choice(ids.device))
    if draft is None:
        seq, step_logits, stats = mtp_speculative_decode(model, ids[:, real], cfg.max_new_tokens, **options)
    else:
        seq, step_logits, stats = speculative_decode(model, draft, ids[:, real], cfg.max_new_tokens,
                                                     **options)
    seq = torch.cat([ids[:, ~real], seq], dim=1)
    return GenerateOutput(seq, None, step_logits, acceptance_rate=stats.acceptance_rate)


def _stop_strings(stops, tokenizer, cfg: GenerationConfig, assistant_model) -> StopStrings | None:
    """The stop-string check a run asks for, or None; refused where it cannot apply."""
    if stops is None:
        return None
    if tokenizer is None or not callable(getattr(tokenizer, "decode", None)):
        raise ValueError("stop_strings needs tokenizer=<a tokenizer with decode(ids)> to read the new tokens "
                         "as text.")
    if cfg.num_beams > 1 or assistant_model is not None:
        raise ValueError("stop_strings applies to greedy decoding and sampling; beam search and speculative "
                         "decoding do not take it.")
    return StopStrings(stops, tokenizer.decode)


def _run(model, ids, mask, cfg: GenerationConfig, pad_id: int, eos_ids: list[int],
         max_len: int | None, stop: StopStrings | None = None) -> GenerateOutput:
    stepper = STEPPERS.get(model.config.arch)(model, ids, mask, pad_id, cfg.use_cache)
    if max_len is not None:
        stepper = StaticStepper(stepper, max_len, compile=cfg.compile)
    if cfg.num_beams > 1 and cfg.max_new_tokens > 0:
        result = beam_search(
            stepper, cfg.num_beams, cfg.max_new_tokens, eos_ids=eos_ids, pad_id=pad_id,
            length_penalty=cfg.length_penalty, early_stopping=cfg.early_stopping,
            num_return_sequences=cfg.num_return_sequences,
        )
        return GenerateOutput(result.sequences, result.scores)
    sequences, step_logits = greedy_or_sample(stepper, cfg.max_new_tokens, eos_ids=eos_ids, pad_id=pad_id,
                                              choice=cfg.choice(ids.device), copies=cfg.num_return_sequences,
                                              stop=stop)
    scores = torch.zeros(sequences.shape[0], device=ids.device) if cfg.num_beams > 1 else None
    return GenerateOutput(sequences, scores, step_logits)
