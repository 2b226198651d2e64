"""Resuming checks the tokenizer's identity, not only its size: a same-size tokenizer trained on other text
maps ids to other tokens, so the checkpoint's embedding rows would silently mean something else."""

from __future__ import annotations

import pytest

from zoo.apps import ConfigError
from zoo.tokenizers.texts import tokenizer_differences, tokenizer_texts
from zoo.tokenizers.trained import train_char
from zoo.training.run import train

from .conftest import TINY_LM, train_losses


def test_same_size_tokenizers_differ_in_what_their_ids_mean():
    abc, abd = train_char(["abc"]), train_char(["abd"])
    assert abc.vocab_size == abd.vocab_size
    assert tokenizer_differences(tokenizer_texts(abc), tokenizer_texts(train_char(["cab"]))) == []
    (vocabulary,) = tokenizer_differences(tokenizer_texts(abc), tokenizer_texts(abd))
    assert vocabulary == ("vocabulary: 1 of 8 ids stand for other tokens, e.g. id 7 is 'c' in the "
                          "checkpoint, 'd' in this run")
    abc.label_names, abd.label_names = ["neg", "pos"], ["pos", "neg"]
    assert tokenizer_differences(tokenizer_texts(abc), tokenizer_texts(train_char(["abc"])))[-1] == (
        "labels: checkpoint ['neg', 'pos'], this run None")


def test_resume_with_a_same_size_tokenizer_of_other_text_is_refused(make_cfg):
    first = train(make_cfg([*TINY_LM, "trainer.max_steps=2", "eval_every=2"], run="first"))
    other_text = [*TINY_LM, "data.max_bytes=100000"]  # BPE retrained on other text: still 300 tokens
    with pytest.raises(ConfigError,
                       match=r"tokenizer vocabulary: \d+ of 300 ids stand for other tokens") as err:
        train(make_cfg([*other_text, f"ckpt_path={first.last_checkpoint}"], run="second"))
    assert "model.vocab_size" not in str(err.value)  # the size is the same: only identity tells them apart
    own = first.output_dir / "tokenizer"
    assert str(err.value).endswith("To resume with the checkpoint's tokenizer: tokenizer=file "
                                   f"tokenizer.path={own}")
    # the advice works: the checkpoint's own tokenizer on the other text resumes
    reused = ([o for o in other_text if not o.startswith("tokenizer.")]
              + ["tokenizer=file", f"tokenizer.path={own}"])
    resumed = train(make_cfg([*reused, "trainer.max_steps=4", "eval_every=2",
                              f"ckpt_path={first.last_checkpoint}"],
                             run="third"))
    assert sorted(train_losses(resumed.output_dir)) == [2, 3]
