"""Each task's numbers against hand-worked references: the loss weight of a written-out batch, accuracy over
uneven batches, the masked-token accuracy and exact match of samples from models whose outputs are known,
and seq2seq's smoothed loss against its closed form."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from zoo.tasks import TASKS
from zoo.tasks.classification import Accuracy
from zoo.tasks.samples import make_samples
from zoo.tokenizers.specials import SpecialTokens
from zoo.utils import IGNORE_INDEX

X = IGNORE_INDEX
LABELS = torch.tensor([[5, 6, X, 7],
                       [X, 8, 9, X]])


@pytest.mark.parametrize(("name", "batch", "expected"), [
    ("lm", {"targets": LABELS}, 5),  # targets are the next tokens already: every one that is not padding
    ("mlm", {"labels": LABELS}, 5),  # every label that is not ignored
    ("seq2seq", {"labels": LABELS}, 5),  # labels align with decoder positions
    ("classification", {"labels": torch.tensor([2, 0, 1])}, 3),  # one per example
])
def test_counted_labels_by_hand(name, batch, expected):
    assert int(TASKS.get(name).counted_labels(batch)) == expected


def test_lm_loss_on_targets_is_the_models_shifted_loss_on_the_whole_window():
    """The lm task on a window of T + 1 tokens (inputs the first T, targets the last T) is the model's own
    `labels=` loss (HF semantics: it shifts) on the whole window: the same T predictions, none lost."""
    from zoo.presets import build
    model = build("gpt_nano", vocab_size=50, max_seq_len=16).eval()
    window = torch.randint(5, 50, (3, 9), generator=torch.Generator().manual_seed(0))
    window[2, 6:] = 0  # a padded row: its pad targets are ignored
    targets = window[:, 1:].clone()
    targets[2, 5:] = X
    labels = window.clone()
    labels[2, 6:] = X
    task = TASKS.get("lm")
    batch = {"input_ids": window[:, :-1], "targets": targets}
    with torch.no_grad():
        ours = task.loss(model(**task.model_inputs(batch)), batch)
        reference = model(window, labels=labels).loss
    assert int(task.counted_labels(batch)) == 3 * 8 - 3
    torch.testing.assert_close(ours, reference)
    with pytest.raises(TypeError, match="targets"):  # a causal batch cannot go into the model whole
        model(**batch)


def test_accuracy_counts_examples_not_batches():
    """3 of 4 right: 0.75 (the mean of the batch accuracies 2/3 and 1/1 would be 0.83)."""
    metric = Accuracy()
    logits = torch.tensor([[2.0, 1, 0], [0, 1, 3], [5, 0, 0], [0, 0, 1]])  # arg-max 0, 2, 0, 2
    labels = torch.tensor([0, 2, 1, 2])
    metric.update(SimpleNamespace(logits=logits[:3]), {"labels": labels[:3]})
    metric.update(SimpleNamespace(logits=logits[3:]), {"labels": labels[3:]})
    assert float(metric.compute()) == pytest.approx(0.75)


class WordTokenizer:
    """Ids are positions in a word list; decode joins words (enough for samples and translate)."""

    unk_id, eos_id = 0, 1
    specials = SpecialTokens.plain(unk=0, eos=1)  # nothing framed around a source, as zoo's own tokenizers

    def __init__(self, words: list[str]) -> None:
        self.words = ["<unk>", "<eos>", *words]

    def encode(self, text: str) -> list[int]:
        return [self.words.index(w) if w in self.words else self.unk_id for w in text.split()]

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return " ".join(self.words[int(i)] for i in ids if not (skip_special_tokens and int(i) < 2))


class Fixed(torch.nn.Module):
    """A model whose forward returns given logits and whose generate returns given rows."""

    def __init__(self, logits=None, generated=None) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))  # a device to put inputs on
        self.config = SimpleNamespace(max_seq_len=8)
        self.logits, self.generated = logits, generated

    def forward(self, input_ids, attention_mask=None):
        return SimpleNamespace(logits=self.logits)

    def generate(self, ids, **kwargs):
        return [self.generated[tuple(row)] for row in ids]


def one_batch(batch):
    return SimpleNamespace(val_dataloader=lambda: iter([batch]))


def test_mlm_samples_fill_the_masked_positions():
    """Row 0 masks positions 1 (label 7) and 3 (label 9), row 1 position 2 (label 4); the model guesses
    7, 2 and 4: two of three right."""
    ids = torch.tensor([[3, 5, 3, 5], [6, 6, 5, 6]])
    labels = torch.tensor([[X, 7, X, 9], [X, X, 4, X]])
    guesses = torch.tensor([[3, 7, 3, 2], [6, 6, 4, 6]])
    logits = torch.nn.functional.one_hot(guesses, 10).float()  # (B, T, V), arg-max = guesses
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    tok = WordTokenizer([f"w{i}" for i in range(2, 10)])
    report = make_samples(TASKS.get("mlm"), Fixed(logits), tok, one_batch(batch), {"num_shown": 2})
    assert report.metrics["sample/masked_token_accuracy"] == pytest.approx(2 / 3)
    assert report.samples[0].output == "w3 w7 w3 w2" and report.samples[0].reference == "w3 w7 w3 w9"


def test_seq2seq_samples_report_exact_match_of_the_test_pairs():
    """Three test pairs, two translated right (whitespace does not count): exact match 2/3."""
    tok = WordTokenizer(["a", "b", "c", "d", "x", "y", "z", "q"])
    sources = {"a b": "x y", "c": "q", "d": "z"}  # source -> what the model says
    generated = {tuple(tok.encode(s)): tok.encode(out) + [tok.eos_id] for s, out in sources.items()}
    datamodule = SimpleNamespace(test_pairs=[("a b", "x  y"), ("c", "z"), ("d", "z")])
    options = {"max_examples": 10, "num_shown": 2}
    report = make_samples(TASKS.get("seq2seq"), Fixed(generated=generated), tok, datamodule, options)
    assert report.metrics["sample/exact_match"] == pytest.approx(2 / 3)
    assert ([(s.input, s.output, s.reference) for s in report.samples]
            == [("a b", "x y", "x  y"), ("c", "q", "z")])


def test_seq2seq_smoothed_loss_closed_form():
    """(1 - e) * NLL(label) + e * mean over the vocabulary of -log p, averaged over counted positions."""
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 5)
    labels = torch.tensor([[1, 4, X, X], [0, 2, 3, X]])
    eps = 0.1
    logp = logits.log_softmax(-1)
    terms = [(1 - eps) * -logp[b, t, labels[b, t]] - eps * logp[b, t].mean()
             for b in range(2) for t in range(4) if labels[b, t] != X]
    expected = float(sum(terms) / len(terms))
    loss = TASKS.get("seq2seq").training_loss(SimpleNamespace(logits=logits, loss=None), {"labels": labels},
                                              eps)
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert not math.isclose(
        expected, float(torch.nn.functional.cross_entropy(logits[labels != X], labels[labels != X])))
