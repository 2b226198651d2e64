"""Every encoder family x head that `zoo.from_pretrained` loads, and what test_heads.py checks for each. The
"Family x head" table of docs/pretrained.md is rendered from CASES: `python -m tests.pretrained.heads_table`
rewrites it, test_heads.py::test_docs_table_is_rendered_from_the_cases checks it is current, and every other
test of test_heads.py runs over CASES, so each cell is a claim a test makes. Add a case to add a row."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from tests.pretrained.shipped import CLASSES, FAMILIES, NAMED

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "pretrained.md"
START, END = "<!-- family-x-head:start -->", "<!-- family-x-head:end -->"

# zoo head -> the outputs compared with transformers' (zoo ModelOutput field -> transformers output field);
# every case also compares `all_hidden_states` with transformers' `hidden_states` (every layer)
OUTPUTS = {
    "none": {"last_hidden_state": "last_hidden_state", "pooler_output": "pooler_output"},
    "lm": {"logits": "logits"},
    "classifier": {"logits": "logits"},
    "token_classifier": {"logits": "logits"},
    "qa": {"start_logits": "start_logits", "end_logits": "end_logits"},
}


@dataclass(frozen=True)
class Case:
    """A folder of transformers class `suffix` of `family`: zoo loads it as `head`, exports it as `exports`."""

    family: str
    suffix: str  # the transformers class-name suffix the folder's `architectures` names
    head: str  # the zoo model.head it loads as
    exports: str = ""  # the class-name suffix zoo writes back ("": the same)
    outputs: tuple[tuple[str, str], ...] = ()  # (zoo, transformers) fields compared; () -> OUTPUTS[head]
    why: str = ""  # why the export class differs
    warns: str = ""  # the warning loading gives (tensors of the class zoo does not use)

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


def _case(family: str, head: str) -> Case:
    if (family, head) == ("distilbert", "none"):  # DistilBertModel has no pooler
        return Case(family, CLASSES[head], head, outputs=(("last_hidden_state", "last_hidden_state"),))
    return Case(family, CLASSES[head], head)


CASES = [
    *(_case(family, head) for family in FAMILIES for head in CLASSES),
    Case("bert", "ForPreTraining", "lm", exports="ForMaskedLM", outputs=(("logits", "prediction_logits"),),
         why="the next-sentence head is not kept", warns="the next-sentence head is not used"),
]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    """The markdown table, markers included."""
    lines = [START,
             "| transformers class (`architectures`) | loads as | outputs equal to transformers' within 1e-4 "
             "(padded batch) | export writes | transformers reloads the export with equal outputs |",
             "|---|---|---|---|---|"]
    for case in CASES:
        compared = ", ".join(f"`{zoo}`" for zoo in case.compared)
        exported = "the same class" if case.export_class == case.hf_class else f"`{case.export_class}` ({case.why})"
        reload = "yes" + (", `id2label` / `label2id` kept" if case.labelled else "")
        lines.append(f"| `{case.hf_class}` | `head: {case.head}` | {_cell(compared)}, every layer's "
                     f"`all_hidden_states` | {_cell(exported)} | {reload} |")
    return "\n".join([*lines, END])


def replace_table(text: str) -> str:
    """`text` with everything from START to END replaced by the rendered table."""
    head, rest = text.split(START, 1)
    return head + render() + rest.split(END, 1)[1]


def main() -> int:
    """Rewrite the table in docs/pretrained.md (`python -m tests.pretrained.heads_table`)."""
    DOC.write_text(replace_table(DOC.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"{DOC}: {len(CASES)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
