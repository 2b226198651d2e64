"""Tiny configs for every registered task, composed the way train.py composes them."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from zoo.hydra_schema import part_overrides
from zoo.training.hydra_configs import register_train_configs

register_train_configs()  # model/_schema, data/auto, callbacks/_declared: what conf/config.yaml composes from

CONF = Path(__file__).resolve().parents[2] / "conf"

# A small model of any architecture: gpt_nano's sizes with the task's arch and head.
TINY_MODEL = ["model=gpt_nano", "model.max_seq_len=32", "tokenizer.vocab_size=300", "batch_size=4"]
LABELS = {"pos": "good great fine", "neg": "bad awful poor", "mix": "so so okay"}
PEOPLE = ["Alice", "Bob", "Carol", "Dmitri", "Eun-ji"]
PLACES = ["Paris", "Rome", "Oslo", "Lima", "Seoul"]
FILLER = "went to saw in met the and a quickly with from over".split()


def tiny_data(kind: str, files: Mapping[str, Path]) -> list[str]:
    """Overrides naming small data of one corpus kind (a task reading a new kind adds a row here); `files`:
    corpus kind -> a generated data file (the task_files fixture)."""
    return {
        "text": ["data=stdlib_text", "data.max_bytes=120000"],
        "pairs": ["data=translation_toy", "data.n_pairs=400", "data.n_test=20"],
        "labelled": ["data=classification", f"data.path={files.get('labelled')}"],
        "tagged": ["data=token_tags", f"data.path={files.get('tagged')}"],
        "qa": ["data=squad", f"data.path={files.get('qa')}", "data.doc_stride=4"],
        "chat": ["data=chat", f"data.path={files.get('chat')}"],
        "preference": ["data=preference", f"data.path={files.get('preference')}"],
        "prompts": ["data=prompts", f"data.path={files.get('prompts')}", "grpo.rewards=[answer_match]",
                    "grpo.num_generations=2", "grpo.max_completion_length=4"],
    }[kind]


def write_tagged(path: Path, n: int, seed: int = 0, people: Sequence[str] = PEOPLE,
                 places: Sequence[str] = PLACES, filler: Sequence[str] = FILLER) -> Path:
    """`n` NER sentences whose entities are detectable words: people (B-PER, "Dr. X" as B-PER I-PER), places
    (B-LOC, "New York" as B-LOC I-LOC) among filler words (O)."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n):
            words, tags = [], []
            for _ in range(rng.randint(3, 9)):
                r = rng.random()
                if r < 0.2:
                    words, tags = words + [rng.choice(people)], tags + ["B-PER"]
                elif r < 0.3:
                    words, tags = words + ["Dr.", rng.choice(people)], tags + ["B-PER", "I-PER"]
                elif r < 0.45:
                    words, tags = words + [rng.choice(places)], tags + ["B-LOC"]
                elif r < 0.52:
                    words, tags = words + ["New", "York"], tags + ["B-LOC", "I-LOC"]
                else:
                    words, tags = words + [rng.choice(filler)], tags + ["O"]
            f.write(json.dumps({"tokens": words, "tags": tags}) + "\n")
    return path


def write_squad(path: Path, n: int, seed: int = 0, length: tuple[int, int] = (4, 30),
                people: Sequence[str] = PEOPLE, places: Sequence[str] = PLACES,
                filler: Sequence[str] = FILLER) -> Path:
    """`n` SQuAD-style examples: "Where does X live?" over a context of filler words (`length` each side)
    around "X lives in Y." (another person living elsewhere around it); the answer is Y."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n):
            person, place = rng.choice(people), rng.choice(places)
            other = rng.choice([p for p in people if p != person])
            parts = [" ".join(rng.choice(filler) for _ in range(rng.randint(*length))) for _ in range(2)]
            facts = [f"{person} lives in {place}.", f"{other} lives in {rng.choice(places)}."]
            rng.shuffle(facts)
            context = f"{parts[0]} {facts[0]} {parts[1]} {facts[1]}"
            start = context.index(f"{person} lives in ") + len(f"{person} lives in ")
            f.write(json.dumps({"question": f"Where does {person} live?", "context": context,
                                "answers": {"text": [place], "answer_start": [start]}}) + "\n")
    return path


@pytest.fixture(scope="session")
def task_files(tmp_path_factory) -> dict[str, Path]:
    """Corpus kind -> a small generated data file of that kind."""
    folder = tmp_path_factory.mktemp("task_data")
    labelled = folder / "labelled.jsonl"
    labelled.write_text("".join(json.dumps({"text": f"{words} {i}", "label": label}) + "\n"
                                for i in range(40) for label, words in LABELS.items()), encoding="utf-8")
    chat = folder / "chat.jsonl"
    turns = [[{"role": "user", "content": f"Where is {p}?"},
              {"role": "assistant", "content": f"{p} is in {q}."}] for p in PEOPLE for q in PLACES]
    chat.write_text("".join(json.dumps({"messages": m}) + "\n" for m in turns), encoding="utf-8")
    preference = folder / "preference.jsonl"  # task=dpo: the right place chosen over the next one
    preference.write_text("".join(json.dumps({"prompt": f"Where is {p}? ", "chosen": f"In {q}.",
                                              "rejected": f"In {PLACES[(i + 1) % len(PLACES)]}."}) + "\n"
                                  for p in PEOPLE for i, q in enumerate(PLACES)), encoding="utf-8")
    prompts = folder / "prompts.jsonl"  # task=grpo: sums, the answer checked by answer_match
    prompts.write_text("".join(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n"
                               for a in range(5) for b in range(5)), encoding="utf-8")
    return {"labelled": labelled, "tagged": write_tagged(folder / "tagged.jsonl", 120),
            "qa": write_squad(folder / "qa.jsonl", 60), "chat": chat, "preference": preference,
            "prompts": prompts}


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One token cache for the session: each tokenizer is trained once."""
    return tmp_path_factory.mktemp("zoo_cache")


def compose_cfg(overrides: list[str], root: Path, cache_dir: Path):
    """The config train.py would compose, its run folders under `root`."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=[  # model.<part>=... as train.py reads it
            *part_overrides(overrides), f"paths.output_dir={root / 'runs' / 'run'}",
            f"paths.runs_dir={root / 'runs'}",
            f"paths.cache_dir={cache_dir}",
        ])


def compose_eval(overrides: list[str], root: Path, cache_dir: Path):
    """The config evaluate.py would compose (conf/evaluate.yaml), writing under `root`."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("evaluate", overrides=[*overrides, f"paths.output_dir={root / 'eval'}",
                                              f"paths.cache_dir={cache_dir}"])


@pytest.fixture
def make_cfg(tmp_path, cache_dir):
    """make_cfg(overrides) -> the composed config, writing under tmp_path."""
    return lambda overrides: compose_cfg(overrides, tmp_path, cache_dir)
