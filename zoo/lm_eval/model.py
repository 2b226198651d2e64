"""`ZooLM`: a zoo decoder as an lm-evaluation-harness model, registered as `zoo`. lm-eval's own TemplateLM
turns (context, continuation) text into ids exactly as its `hf` model does (trailing context spaces move to
the continuation, the pair is encoded whole and split at the context's length, an empty context is the
prefix token); zoo.lm_eval.batching scores the ids; generation is `model.generate`, each row stopping as
soon as its text holds a stop string (zoo.generation.stopping), then cut before it.
`--apply_chat_template` renders lm-eval's few-shot chat with the tokenizer's chat template as its `hf` model
does through transformers (zoo/tokenizers/chat.py). Needs `pip install 'zoo[lmeval]'`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from zoo.generation.stopping import overlap_free
from zoo.lm_eval.batching import TokenRequest, loglikelihoods
from zoo.tokenizers.chat import ChatTemplateError, named_template

SAMPLING_KEYS = ("temperature", "top_k", "top_p", "seed")  # lm-eval gen_kwargs zoo's generate takes as such


class ModelArgsError(ValueError):
    """Bad `--model_args` (or a model they name that cannot be opened): `python -m zoo.lm_eval` prints it as
    one `error:` line."""


def open_pretrained(ckpt: str | None, hf: str | None):
    """(model, tokenizer) of a zoo checkpoint or export folder (`ckpt=`) or a Hugging Face folder (`hf=`)."""
    from zoo.apps import open_model

    if (ckpt is None) == (hf is None):
        raise ValueError("the zoo lm-eval model needs exactly one of ckpt=<checkpoint or zoo export folder> "
                         "and hf=<Hugging Face folder> in --model_args")
    if ckpt is not None:
        model, tokenizer, _ = open_model(ckpt)
        return model, tokenizer
    from zoo.pretrained.api import from_pretrained
    from zoo.tokenizers import load_hf_tokenizer

    return from_pretrained(Path(hf)), load_hf_tokenizer(hf)


@register_model("zoo")
class ZooLM(TemplateLM):
    """lm-eval's three request types on a zoo causal LM: `--model zoo --model_args ckpt=PATH` (a training
    checkpoint or a zoo export folder) or `hf=FOLDER`, with `max_length=` (default: the model's
    max_seq_len) and `max_gen_toks=` (default 256); `--batch_size N` rows per forward."""

    def __init__(self, ckpt: str | None = None, hf: str | None = None, *, batch_size: int | str | None = 1,
                 max_batch_size: int | None = None, device: str | None = None, max_length: int | None = None,
                 max_gen_toks: int = 256, **unknown: Any) -> None:
        try:
            if unknown:
                raise ValueError(f"the zoo lm-eval model has no argument {sorted(unknown)[0]!r}; its "
                                 "--model_args: ckpt, hf, max_length, max_gen_toks (and --batch_size, "
                                 "--device)")
            model, tokenizer = open_pretrained(ckpt, hf)
            self._init(model, tokenizer, batch_size=batch_size, device=device, max_length=max_length,
                       max_gen_toks=max_gen_toks)
        except (ValueError, OSError) as e:  # CheckpointError is a ValueError; a missing folder an OSError
            given = f"ckpt={ckpt}: " if ckpt is not None and hf is None else f"hf={hf}: " if hf else ""
            raise ModelArgsError(f"{given}{e}") from None

    @classmethod
    def from_model(cls, model: torch.nn.Module, tokenizer, *, batch_size: int = 1, device: str | None = None,
                   max_length: int | None = None, max_gen_toks: int = 256) -> ZooLM:
        """The lm-eval model of a zoo model already in memory (`lm_eval.simple_evaluate(model=...)`)."""
        self = cls.__new__(cls)
        self._init(model, tokenizer, batch_size=batch_size, device=device, max_length=max_length,
                   max_gen_toks=max_gen_toks)
        return self

    def _init(self, model, tokenizer, *, batch_size, device, max_length, max_gen_toks) -> None:
        super().__init__()
        config = model.config
        if not getattr(model, "causal_lm", False):
            raise ValueError(f"lm-eval scores causal language models; this model is arch={config.arch} with "
                             f"head={config.head.name} (a decoder with head=lm is needed)")
        self.batch_size = _positive(batch_size, "batch_size")
        self.max_length = _positive(max_length or config.max_seq_len, "max_length")
        self.max_gen_toks = _positive(max_gen_toks, "max_gen_toks")
        # lm-eval 0.4.13 passes device="cuda:0" by default; without CUDA use the CPU, as its hf model does
        if device is None or (torch.device(device).type == "cuda" and not torch.cuda.is_available()):
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self._device = torch.device(device)
        self.model = model.eval().to(self._device)
        self.tokenizer = tokenizer
        self._chat = False  # contexts are chat text (--apply_chat_template)
        self._chat_name: str | None = None  # the named template --apply_chat_template picked

    # ------------------------------------------------------------------ what TemplateLM asks of a model
    @property
    def eot_token_id(self) -> int:
        """End of text: the tokenizer's eos (else its padding id), as lm-eval's hf model uses eos."""
        eos = self.tokenizer.eos_id
        return self.tokenizer.padding_id if eos is None else eos

    @property
    def prefix_token_id(self) -> int:
        """What an empty context and each rolling window start from: bos, else eos (lm-eval's hf rule)."""
        bos = self.tokenizer.bos_id
        return self.eot_token_id if bos is None else bos

    @property
    def tokenizer_name(self) -> str:
        return f"zoo-{self.tokenizer.kind}"

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        """The template `--apply_chat_template` applies (lm-eval asks this first): the tokenizer's (a name
        picks one of a folder's named templates; true: its default); from then on contexts are chat text,
        encoded with the special-token text the template writes as those tokens. None when not asked."""
        if chat_template is False or chat_template is None:
            return None
        template = self.tokenizer.chat_template
        if template is None:
            raise ModelArgsError(f"--apply_chat_template: this {self.tokenizer.kind} tokenizer has no chat "
                                 "template (chat_template.jinja or tokenizer_config.json's chat_template in "
                                 "its Hugging Face folder); run without --apply_chat_template")
        name = None if isinstance(template, str) or chat_template is True else chat_template
        try:
            chosen = named_template(template, name or "default")
        except ValueError as e:
            raise ModelArgsError(f"--apply_chat_template: {e}") from None
        self._chat, self._chat_name = True, name
        return chosen

    def apply_chat_template(self, chat_history: list[dict[str, str]],
                            add_generation_prompt: bool = True) -> str:
        """lm-eval's few-shot chat as text, as its hf model renders it with transformers: a generation prompt
        after it, or (a task's gen_prefix, the final assistant message) ending inside the last message
        (continue_final_message); a template that refuses (Gemma's system role) is tried again without the
        system messages."""
        self._chat = True
        try:
            return self._chat_text(chat_history, add_generation_prompt)
        except ChatTemplateError:
            return self._chat_text([m for m in chat_history if m["role"] != "system"], add_generation_prompt)

    def _chat_text(self, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
        return self.tokenizer.chat_text(messages, add_generation_prompt=add_generation_prompt,
                                        continue_final_message=not add_generation_prompt,
                                        template=self._chat_name)

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        """Ids of `string` as transformers' `tokenizer.encode` gives them: the tokenizer's own specials added
        (a Llama BOS; zoo's kinds add none) unless told otherwise or the text already starts with the
        prefix token's text."""
        if add_special_tokens is None:
            bos = self.tokenizer.decode([self.prefix_token_id], skip_special_tokens=False)
            add_special_tokens = not (bos and string.startswith(bos))
        if self._chat:  # chat text: the template's control tokens are tokens
            return self.tokenizer.encode_chat(string, add_special_tokens=add_special_tokens)
        return self.tokenizer.hf.encode(string, add_special_tokens=add_special_tokens).ids

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(ids.to(self._device)).logits

    # ------------------------------------------------------------------ the three request types
    def _loglikelihood_tokens(self, requests: Sequence[tuple[Any, list[int], list[int]]],
                              disable_tqdm: bool = False, **kwargs: Any) -> list[tuple[float, bool]]:
        """(log p(continuation | context), greedy?) for requests already in ids: (strings, context, cont)."""
        scores = self._score([TokenRequest(tuple(ctx), tuple(cont)) for _, ctx, cont in requests])
        for (strings, _, _), score in zip(requests, scores, strict=True):
            if strings is not None:
                self.cache_hook.add_partial("loglikelihood", strings, score)
        return scores

    def _score(self, requests: Sequence[TokenRequest]) -> list[tuple[float, bool]]:
        return loglikelihoods(self._forward, requests, max_length=self.max_length, batch_size=self.batch_size,
                              pad_id=self.tokenizer.padding_id)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Each text's total log-likelihood, every token predicted once from the prefix token on, in windows
        of max_length (lm-eval's rolling windows); the windows of all texts are batched together."""
        windows, owners = [], []
        for n, (string,) in enumerate(req.args for req in requests):
            tokens = self.tok_encode(string)
            for ctx, cont in map(make_disjoint_window, get_rolling_token_windows(
                    token_list=tokens, prefix_token=self.prefix_token_id, max_seq_len=self.max_length,
                    context_len=1)):
                windows.append(TokenRequest(tuple(ctx), tuple(cont)))
                owners.append(n)
        totals = [0.0] * len(requests)
        for n, (logprob, _) in zip(owners, self._score(windows), strict=True):
            totals[n] += logprob
        for req, total in zip(requests, totals, strict=True):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Continuations of each context until a stop string (or eos, or max_gen_toks tokens), the stop
        string cut off; a row stops decoding at its first stop string (the batch runs until its last row
        stops) unless the stop strings overlap, when the text could differ from cutting the full run;
        requests with the same generation settings run longest first, `batch_size` at a time, through
        `model.generate`."""
        groups: dict[str, list[int]] = {}
        for i, req in enumerate(requests):
            groups.setdefault(json.dumps(req.args[1], sort_keys=True, default=str), []).append(i)
        out: list[str] = [""] * len(requests)
        eos = self.tokenizer.decode([self.eot_token_id], skip_special_tokens=False)
        for members in groups.values():
            kwargs = normalize_gen_kwargs(dict(requests[members[0]].args[1]), self.max_gen_toks)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
            new_tokens = kwargs.pop("max_gen_toks")
            options = _decoding_options(kwargs)
            stop = until if until and overlap_free(until) else None  # else the full budget, then the cut
            room = self.max_length - new_tokens
            if room <= 0:
                raise ValueError(f"max_gen_toks={new_tokens} leaves no room for a context in the model's "
                                 f"max_length={self.max_length}")
            prompts = {i: self.tok_encode(requests[i].args[0])[-room:] for i in members}
            order = sorted(members, key=lambda i: (-len(prompts[i]), requests[i].args[0]))
            for start in range(0, len(order), self.batch_size):
                chunk = order[start:start + self.batch_size]
                seqs = self.model.generate([prompts[i] for i in chunk], max_new_tokens=new_tokens,
                                           stop_strings=stop, tokenizer=self.tokenizer, **options)
                width = max(len(prompts[i]) for i in chunk)  # prompts are left-padded to the widest
                for i, row in zip(chunk, seqs[:, width:], strict=True):
                    text = postprocess_generated_text(self.tokenizer.decode(row), until, None)
                    out[i] = text
                    self.cache_hook.add_partial("generate_until", requests[i].args, text)
        return out


def _decoding_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """lm-eval's normalized gen_kwargs as `model.generate` options: greedy unless do_sample, then its
    temperature / top_k / top_p / seed; any other key is refused by name."""
    sample = bool(kwargs.pop("do_sample", False))
    unknown = sorted(set(kwargs) - set(SAMPLING_KEYS))
    if unknown:
        raise ValueError(f"the zoo lm-eval model does not support the generation option {unknown[0]!r} "
                         f"(supported: until, max_gen_toks, do_sample, {', '.join(SAMPLING_KEYS)})")
    if not sample:
        return {}
    return {"do_sample": True, **{k: v for k, v in kwargs.items() if v is not None}}


def _positive(value: Any, name: str) -> int:
    """`value` (an int, or its text from --model_args) as an int >= 1, else one error naming `name`."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1 or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"{name} must be an integer >= 1 for the zoo lm-eval model, got {value!r}")
    return number
