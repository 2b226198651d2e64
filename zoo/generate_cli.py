"""The `generate.py` command line: `key=value` arguments checked against a schema (unknown keys fail with a
close match; a prompt, source, system message or path is taken as typed, whatever it holds), a checkpoint with
its saved tokenizer, prompts / sources from the command line, a file, or an interactive loop; with `chat=true`
each prompt is the user's message under the tokenizer's chat template (zoo/tokenizers/chat.py), or
`messages_file=` gives a whole conversation."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from zoo.apps import PATH, check_device, cli_key, parse_key_values
from zoo.generation.config import GenerationConfig
from zoo.generation.mtp_draft import SELF_DRAFT
from zoo.quantization.options import QuantizeOptions
from zoo.tokenizers.chat import read_messages

# GenerationConfig options the command line does not expose: EOS / pad come from the tokenizer, and the
# output shape is fixed
NOT_ON_CLI = ("return_dict", "eos_token_id", "pad_token_id")
DECODING_KEYS = [f.name for f in dataclasses.fields(GenerationConfig) if f.name not in NOT_ON_CLI]
# The one decoding default the script changes: a reader at the terminal wants more than the library's 20
CLI_DEFAULTS = {"max_new_tokens": 64}
INPUTS = ("prompt", "prompts_file", "src", "src_file", "messages_file")  # one of them, or stdin
NULLABLE = ("cache_implementation", "quantize")  # text keys that are names, where `null` means None (default)


@dataclass
class _ScriptOptions(QuantizeOptions):
    """The keys only `generate.py` has: what to load, what to read, where to run, what to print (and the
    `quantize*` keys it shares with serve.py)."""

    ckpt: str | None = cli_key(rule=PATH)  # a training checkpoint (.ckpt) or an export folder
    prompt: str | None = None  # decoder: text to continue
    prompts_file: str | None = cli_key(rule=PATH)  # decoder: one prompt per line
    src: str | None = None  # encoder-decoder: a source sentence
    src_file: str | None = cli_key(rule=PATH)  # encoder-decoder: one source per line
    interactive: bool = False  # read prompts / sources from stdin, one per line
    chat: bool = False  # decoder: each prompt is the user's message under the tokenizer's chat template
    system: str | None = None  # chat: a system message before each prompt
    # chat: a JSON list of {"role", "content"} messages, one conversation
    messages_file: str | None = cli_key(rule=PATH)
    continue_final_message: bool = False  # chat: messages_file's last message is continued (a reply begun)
    device: str = "cpu"
    batch_size: int = 16
    show_scores: bool = False  # print each beam hypothesis' length-normalised log-probability
    # a smaller decoder with the same tokenizer: speculative decoding
    assistant_ckpt: str | None = cli_key(rule=PATH)
    # self-speculation: the checkpoint's own multi-token-prediction modules (model.mtp) draft
    assistant_mtp: bool = False

    def decoding(self) -> GenerationConfig:
        """The decoding options given on the command line, as the library's validated record."""
        return GenerationConfig(**{k: getattr(self, k) for k in DECODING_KEYS})


def _decoding_field(f: dataclasses.Field) -> tuple[str, object, dataclasses.Field]:
    if f.name in CLI_DEFAULTS:
        return f.name, f.type, dataclasses.field(default=CLI_DEFAULTS[f.name])
    return f.name, f.type, dataclasses.field(default=f.default, default_factory=f.default_factory)


# Everything `python generate.py key=value ...` accepts: the script's own keys, then GenerationConfig's
# decoding fields (same names, types and defaults, except CLI_DEFAULTS), derived so they cannot drift.
GenerateCLIConfig = dataclasses.make_dataclass(
    "GenerateCLIConfig",
    [_decoding_field(f) for f in dataclasses.fields(GenerationConfig) if f.name in DECODING_KEYS],
    bases=(_ScriptOptions,),
    namespace={"__module__": __name__, "__doc__": "Everything `python generate.py key=value ...` accepts."},
)


def parse_overrides(argv: Sequence[str]) -> GenerateCLIConfig:
    """`key=value` strings -> a checked config: text keys (prompt, src, system, paths) as typed, whatever they
    hold; the others read as Hydra reads a value (zoo.apps.parse_key_values)."""
    cfg = parse_key_values(argv, GenerateCLIConfig, nullable=NULLABLE)
    inputs = [k for k in INPUTS if getattr(cfg, k) is not None]
    if cfg.ckpt is None:
        raise ValueError("ckpt=PATH is required (a training checkpoint .ckpt or an export folder).")
    if len(inputs) > 1:
        raise ValueError(f"Give one input source, got {', '.join(inputs)}.")
    if not inputs and not cfg.interactive:
        raise ValueError("Give prompt=..., prompts_file=..., src=..., src_file=... or interactive=true.")
    needs_chat = [k for k in ("system", "messages_file") if getattr(cfg, k) is not None]
    if needs_chat and not cfg.chat:
        raise ValueError(f"{needs_chat[0]}=... is for chat; add chat=true.")
    if cfg.continue_final_message and (not cfg.chat or cfg.messages_file is None):
        raise ValueError("continue_final_message=true continues the last message of a conversation; give it "
                         "with chat=true messages_file=...")
    if cfg.assistant_mtp and cfg.assistant_ckpt is not None:
        raise ValueError("assistant_ckpt=... and assistant_mtp=true both choose the draft model; give one "
                         "(assistant_mtp=true: the checkpoint's own model.mtp modules draft).")
    if cfg.batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {cfg.batch_size!r}.")
    check_device(cfg.device)
    cfg.check_quantize(cfg.device)
    cfg.decoding().validate(vocab_size=sys.maxsize)  # option errors before the checkpoint is opened
    return cfg


def read_inputs(cfg: GenerateCLIConfig, model) -> list[Any]:
    """The texts to continue / translate (chat: user messages, or one conversation from messages_file);
    checks they match the model's architecture."""
    want_src, arch = model.is_encoder_decoder, model.config.arch
    given = next((k for k in INPUTS if getattr(cfg, k) is not None), None)
    if cfg.chat and want_src:
        raise ValueError(f"chat=true needs a decoder; this is a model.arch={arch!r} checkpoint.")
    if given is not None and given.startswith("src") != want_src:
        wanted = "src=... or src_file=..." if want_src else "prompt=... or prompts_file=..."
        raise ValueError(f"{given}=... does not fit a model.arch={arch!r} checkpoint; use {wanted}.")
    if given in ("prompt", "src"):
        return [getattr(cfg, given)]
    if given == "messages_file":
        return [read_messages(cfg.messages_file, "messages_file")]
    if given is None:
        return []
    path = Path(getattr(cfg, given))
    if not path.is_file():
        raise ValueError(f"{given}={str(path)!r}: no such file.")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        where = f"{e.reason} at byte {e.start}"
        raise ValueError(f"{given}={str(path)!r} is not UTF-8 text ({where}); save it as UTF-8.") from None
    except OSError as e:
        raise ValueError(f"{given}={str(path)!r} cannot be read: {e.strerror or e}.") from None
    texts = [line for line in lines if line.strip()]
    if not texts:
        raise ValueError(f"{given}={str(path)!r} holds no non-empty lines.")
    return texts


def prompt_encoder(cfg: GenerateCLIConfig, tokenizer) -> Callable[[Any], list[int]]:
    """How an input becomes prompt ids: its text as it is, or (chat=true) the conversation of the system
    message and the input as the user's (or messages_file's conversation) under the chat template."""
    if not cfg.chat:
        return tokenizer.encode
    if tokenizer.chat_template is None:
        tokenizer.chat_ids([])  # raises naming where a template is read from
    system = [] if cfg.system is None else [{"role": "system", "content": cfg.system}]
    return lambda given: tokenizer.chat_ids(given if isinstance(given, list)
                                            else [*system, {"role": "user", "content": given}],
                                            continue_final_message=cfg.continue_final_message)


def run_texts(model, tokenizer, texts: Sequence[Any], cfg: GenerateCLIConfig,
              assistant=None) -> list[list[tuple[str, float | None]]]:
    """Generate for each text (chat: message or conversation): a list of (output text, score or None) per
    text. With an assistant (a draft model, or "mtp": the model's own MTP modules), texts run one at a time
    (speculative decoding is batch 1)."""
    results: list[list[tuple[str, float | None]]] = []
    batch_size = 1 if assistant is not None else cfg.batch_size
    extra = {"assistant_model": assistant} if assistant is not None else {}
    n = cfg.num_return_sequences
    decoder = not model.is_encoder_decoder  # continuations repeat the prompt; translations do not
    options = {k: getattr(cfg, k) for k in DECODING_KEYS}
    encode = prompt_encoder(cfg, tokenizer)
    for start in range(0, len(texts), batch_size):
        chunk = texts[start : start + batch_size]
        ids = [encode(t) for t in chunk]
        for i, row in enumerate(ids):
            if not row:
                raise ValueError(f"Input {start + i} ({chunk[i]!r}) encodes to no tokens; give some text.")
        out = model.generate(ids, eos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.pad_id,
                             return_dict=True, **extra, **options)
        width = max(len(r) for r in ids)  # sequences (len(chunk) * n, L): n per text, new ids after width
        new = [row[width:] if decoder else row[1:] for row in out.sequences]
        scores = [None] * len(new) if out.scores is None else out.scores.tolist()
        decoded = [(tokenizer.decode(row.tolist(), skip_special_tokens=True), score)
                   for row, score in zip(new, scores, strict=True)]
        results += [decoded[i * n : (i + 1) * n] for i in range(len(chunk))]
    return results


def print_results(texts: Iterable[Any], results, cfg: GenerateCLIConfig, decoder: bool, out: TextIO) -> None:
    """Each input after `>>>`, then its outputs: a continuation repeats the prompt, a translation or a chat
    reply does not (a conversation is shown by its last message)."""
    for text, outputs in zip(texts, results, strict=True):
        shown = text[-1]["content"] if isinstance(text, list) else text
        print(f">>> {shown}", file=out)
        for k, (generated, score) in enumerate(outputs):
            prefix = f"[{k}] " if len(outputs) > 1 else ""
            suffix = f"  (score {score:.4f})" if cfg.show_scores and score is not None else ""
            print(f"{prefix}{text + generated if decoder and not cfg.chat else generated}{suffix}", file=out)


def self_draft(cfg: GenerateCLIConfig, model) -> str:
    """assistant_mtp=true: the library's assistant_model value for self-speculation, once the checkpoint is
    known to hold model.mtp (refused naming the key and the checkpoint otherwise)."""
    if getattr(model, "mtp", None) is None:
        raise ValueError(f"assistant_mtp=true drafts with the checkpoint's own multi-token-prediction "
                         f"modules, and ckpt={cfg.ckpt!r} has none (its model.mtp is null); give a "
                         "smaller decoder as assistant_ckpt=PATH, or train with model.mtp={name: sequential, "
                         "depth: N}.")
    return SELF_DRAFT


def main(argv: Sequence[str], stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> int:
    from zoo.apps import open_model

    cfg = parse_overrides(argv)
    model, tokenizer, _ = open_model(cfg.ckpt)  # a training checkpoint (read once) or an export folder
    model = cfg.apply_quantize(model.to(cfg.device))  # a shape the kernel cannot take: refused here
    assistant = None
    if cfg.assistant_ckpt is not None:  # its fit (architecture, vocabulary) is checked by generate
        assistant = open_model(cfg.assistant_ckpt)[0].to(cfg.device)
    elif cfg.assistant_mtp:
        assistant = self_draft(cfg, model)
    decoder = not model.is_encoder_decoder
    texts = read_inputs(cfg, model)
    prompt_encoder(cfg, tokenizer)  # a chat without a template fails before any generation
    if texts:
        print_results(texts, run_texts(model, tokenizer, texts, cfg, assistant), cfg, decoder, stdout)
    if cfg.interactive:
        kind = "user message" if cfg.chat else "prompt" if decoder else "source sentence"
        print(f"Type a {kind} per line; an empty line or Ctrl-D quits.", file=stdout, flush=True)
        for line in stdin:
            line = line.rstrip("\n")
            if not line.strip():
                break
            print_results([line], run_texts(model, tokenizer, [line], cfg, assistant), cfg, decoder, stdout)
            stdout.flush()
    return 0
