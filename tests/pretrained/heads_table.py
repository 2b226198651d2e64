"""Every family x head that `zoo.from_pretrained` loads, and what test_heads.py checks for each. The
"Family x head" table of docs/pretrained.md is rendered from CASES: `python -m tests.pretrained.heads_table`
rewrites it, test_heads.py::test_docs_table_is_rendered_from_the_cases checks it is current, and every other
test of test_heads.py runs over CASES, so each cell is a claim a test makes. Add a case to add a row."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import transformers

from tests.doc_tables import cell, rewrite
from tests.pretrained.shipped import CLASSES, DECODERS, ENCODERS, FAMILIES, NAMED, ROPE_ENCODERS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "pretrained.md"
START, END = "<!-- family-x-head:start -->", "<!-- family-x-head:end -->"

# zoo head -> the outputs compared with transformers' (zoo ModelOutput field -> transformers output field);
# every case also compares every layer's hidden states (Kind.hidden)
OUTPUTS = {
    "none": {"last_hidden_state": "last_hidden_state", "pooler_output": "pooler_output"},
    "lm": {"logits": "logits"},
    "classifier": {"logits": "logits"},
    "token_classifier": {"logits": "logits"},
    "qa": {"start_logits": "start_logits", "end_logits": "end_logits"},
}


@dataclass(frozen=True)
class Kind:
    """How a case's models are fed and compared: an encoder's batch (token types where the family has them), a
    decoder's (also left-padded with position_ids), an encoder-decoder's (source + decoder_input_ids)."""

    name: str
    hidden: tuple[tuple[str, str], ...]  # (zoo field, transformers field) holding every layer's hidden states
    real_only: bool = False  # per-token outputs compared at real tokens
                             # (a decoder's right pads are a convention)
    left_padded: bool = False  # also compared left-padded, with position_ids = cumsum(mask) - 1
    decoder_ids: bool = False  # takes decoder_input_ids beside the source
    padding: str = ""  # how the batch is padded, for the docs


KINDS = {
    "encoder": Kind("encoder", (("all_hidden_states", "hidden_states"),)),
    "decoder": Kind("decoder", (("all_hidden_states", "hidden_states"),), real_only=True, left_padded=True,
                    padding=" at real tokens, right-padded and left-padded with `position_ids`"),
    "seq2seq": Kind("seq2seq", (("all_hidden_states", "decoder_hidden_states"),
                                ("encoder_all_hidden_states", "encoder_hidden_states")), decoder_ids=True),
}


@dataclass(frozen=True)
class Case:
    """A folder of transformers class `suffix` of `family`: zoo loads it as `head`, exports it as
    `exports`."""

    family: str
    suffix: str  # the transformers class-name suffix the folder's `architectures` names
    head: str  # the zoo model.head it loads as
    exports: str = ""  # the class-name suffix zoo writes back ("": the same)
    outputs: tuple[tuple[str, str], ...] = ()  # (zoo, transformers) fields compared; () -> OUTPUTS[head]
    why: str = ""  # why the export class differs
    warns: str = ""  # the warning loading gives (tensors of the class zoo does not use)
    kind: str = "encoder"  # KINDS: how it is run
    note: str = ""  # what else the row says about how it loads

    @property
    def id(self) -> str:
        return f"{self.family}-{self.suffix}"

    @property
    def hf_class(self) -> str:
        return FAMILIES[self.family][2] + self.suffix

    @property
    def export_class(self) -> str:
        return FAMILIES[self.family][2] + (self.exports or self.suffix)

    @property
    def compared(self) -> dict[str, str]:
        return dict(self.outputs) if self.outputs else OUTPUTS[self.head]

    @property
    def labelled(self) -> bool:
        return self.head in NAMED

    @property
    def runs(self) -> Kind:
        return KINDS[self.kind]


def _case(family: str, head: str) -> Case:
    if (family, head) == ("distilbert", "none"):  # DistilBertModel has no pooler
        return Case(family, CLASSES[head], head, outputs=(("last_hidden_state", "last_hidden_state"),))
    return Case(family, CLASSES[head], head)


HIDDEN = (("last_hidden_state", "last_hidden_state"),)  # a bare model without pooler
LM_SUFFIX = {"gpt2": "LMHeadModel"}  # the decoders' causal LM when not *ForCausalLM


def _decoder_cases(family: str) -> list[Case]:
    """Every class of the decoder family that transformers has, among the bare model and the heads zoo
    loads."""
    suffixes = {"none": "Model", "lm": LM_SUFFIX.get(family, "ForCausalLM"), **{h: CLASSES[h] for h in NAMED},
                "qa": CLASSES["qa"]}
    return [Case(family, suffix, head, kind="decoder", outputs=HIDDEN if head == "none" else ())
            for head, suffix in suffixes.items() if hasattr(transformers, FAMILIES[family][2] + suffix)]


SEQ2SEQ_OUT = ("encoder_hidden_states", "encoder_last_hidden_state")  # the encoder's last output
ENCODER_ONLY = "`arch: encoder` (T5's encoder with its relative position bias)"
SEQ2SEQ_CASES = [
    Case("bart", "Model", "none", kind="seq2seq", outputs=(*HIDDEN, SEQ2SEQ_OUT)),
    Case("bart", "ForConditionalGeneration", "lm", kind="seq2seq",
         outputs=(("logits", "logits"), SEQ2SEQ_OUT)),
    Case("marian", "Model", "none", kind="seq2seq", outputs=(*HIDDEN, SEQ2SEQ_OUT)),
    Case("marian", "MTModel", "lm", kind="seq2seq", outputs=(("logits", "logits"), SEQ2SEQ_OUT)),
    Case("t5", "Model", "none", kind="seq2seq", outputs=(*HIDDEN, SEQ2SEQ_OUT)),
    Case("t5", "ForConditionalGeneration", "lm", kind="seq2seq", outputs=(("logits", "logits"), SEQ2SEQ_OUT)),
    Case("t5", "EncoderModel", "none", outputs=HIDDEN, note=ENCODER_ONLY),
    Case("t5", "ForTokenClassification", "token_classifier", note=ENCODER_ONLY),
]
# classes transformers has that zoo refuses, naming why: they read the decoder's output, and zoo's
# encoder_decoder carries model.head=lm | none
REFUSED = [("bart", "ForSequenceClassification"), ("bart", "ForQuestionAnswering"), ("bart", "ForCausalLM"),
           ("marian", "ForCausalLM"), ("t5", "ForSequenceClassification"), ("t5", "ForQuestionAnswering")]

ENCODER_CASES = [
    *(_case(family, head) for family in ENCODERS for head in CLASSES),
    Case("bert", "ForPreTraining", "lm", exports="ForMaskedLM", outputs=(("logits", "prediction_logits"),),
         why="the next-sentence head is not kept", warns="the next-sentence head is not used"),
]
# ModernBERT: every head (its classifiers run dense + activation + LayerNorm first: model.head.dense);
# ModernBertForMultipleChoice is refused (tests/pretrained/test_modernbert.py checks the reason)
ENCODER_CASES += [Case(family, CLASSES[head], head, outputs=HIDDEN if head == "none" else ())
                  for family in ROPE_ENCODERS for head in CLASSES]
DECODER_CASES = [case for family in DECODERS for case in _decoder_cases(family)]
CASES = [*ENCODER_CASES, *DECODER_CASES, *SEQ2SEQ_CASES]


def render() -> str:
    """The markdown table, markers included."""
    lines = [START,
             "| transformers class (`architectures`) | loads as | outputs equal to transformers' within 1e-4 "
             "(padded batch) | export writes | transformers reloads the export with equal outputs |",
             "|---|---|---|---|---|"]
    for case in CASES:
        compared = ", ".join(f"`{zoo}`" for zoo in case.compared)
        hidden = " and ".join(f"`{zoo}`" for zoo, _ in case.runs.hidden)
        exported = ("the same class" if case.export_class == case.hf_class
                    else f"`{case.export_class}` ({case.why})")
        reload = "yes" + (", `id2label` / `label2id` kept" if case.labelled else "")
        loads = f"`head: {case.head}`" + (f", {case.note}" if case.note else "")
        lines.append(f"| `{case.hf_class}` | {loads} | {cell(compared)}, every layer's "
                     f"{hidden}{case.runs.padding} | {cell(exported)} | {reload} |")
    refused = ", ".join(f"`{FAMILIES[family][2]}{suffix}`" for family, suffix in REFUSED)
    lines += ["", f"Not loaded (the error names each and why): {refused}."]
    return "\n".join([*lines, END])


def main() -> int:
    """Rewrite the table in docs/pretrained.md (`python -m tests.pretrained.heads_table`)."""
    rewrite(DOC, START, END, render)
    print(f"{DOC}: {len(CASES)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
