"""The evaluation run behind `evaluate.py`, callable without `@hydra.main`: `evaluate(cfg)` checks the
config, opens the checkpoint (a training `.ckpt` or a `zoo.export` folder), reads the data with the
checkpoint's own tokenizer, and returns the checkpoint's task's metrics on one split. Bad input raises
ConfigError (one `error:` line, exit 1) before any model runs."""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from zoo.apps import ConfigError, bad_input, open_trained, plain, resolve_data
from zoo.atomic import atomic_file
from zoo.generation.config import GENERATION_OPTIONS as DECODING
from zoo.options import ANY, MAPPING, TEXT, Options, integer, one_of, optional
from zoo.outputs import Output
from zoo.tasks.evaluating import EvalOptions, resolve_split

WHOLE = "all"  # split=all: every example of the data (a user's file scored whole, nothing held out)
# generation.*: the decoding keys a task's evaluation passes on, with the library's rules (null: its default)
GENERATION_OPTIONS = DECODING.only("num_beams", "length_penalty", "max_new_tokens", "early_stopping")
EVALUATE_OPTIONS = Options({
    "ckpt": TEXT, "split": one_of("auto", "val", "test", WHOLE), "batch_size": integer(1),
    "max_examples": optional(integer(1)), "device": one_of("auto", "cpu", "cuda"), "seed": integer(0),
    "output": optional(TEXT), "name": TEXT, "data": MAPPING, "paths": MAPPING, "generation": MAPPING,
    "reference": optional(TEXT), "hydra": ANY,
}, required=frozenset({"ckpt", "data"}))


@dataclass
class EvalReport:
    """What one evaluation measured, as written to the JSON file."""

    checkpoint: str
    task: str
    data: dict[str, Any]
    split: str
    metrics: dict[str, float]

    def to_json(self) -> str:
        clean = {k: None if isinstance(v, float) and not math.isfinite(v) else v
                 for k, v in self.metrics.items()}  # JSON has no NaN
        return json.dumps({**asdict(self), "metrics": clean}, indent=2) + "\n"

    @classmethod
    def wrote(cls, path: Path) -> bool:
        """Whether `path` holds a report evaluate.py wrote (a JSON object of exactly its fields)."""
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(found, dict) and set(found) == {f.name for f in fields(cls)}


REPORT_OUTPUT = Output("output", "an evaluate.py report", folder=False, ours=EvalReport.wrote,
                       example="metrics.json")


def open_checkpoint(path: str):
    """(model, tokenizer, task, task state) of a training checkpoint (the task it was trained on; the file
    read once) or an export folder (the model's default task, no state); anything else is a ConfigError
    naming the file."""
    from zoo.tasks import default_task, get_task

    try:
        model, tokenizer, task, state = open_trained(path)
        return model, tokenizer, get_task(task) if task else default_task(model.config), state
    except (ValueError, KeyError) as e:  # CheckpointError is a ValueError
        raise ConfigError(f"ckpt={path}: {e}") from None


def open_reference(value: str, model: torch.nn.Module) -> torch.nn.Module:
    """`reference=value` (a Hugging Face folder, a zoo checkpoint or export: what init_from reads) built as
    the checkpoint's model, in eval mode; ConfigError naming the key when it is no model or does not fit."""
    from zoo.finetune.init_from import build_initialised, load_state, open_source

    try:
        source = open_source(value)
        reference, fresh = build_initialised(model.config, load_state(source, value), value,
                                             source.model_type)
    except (ValueError, OSError) as e:  # InitError is a ValueError
        raise ConfigError(f"reference={value}: {e}") from None
    if fresh:
        raise ConfigError(f"reference={value}: it lacks the checkpoint's {', '.join(fresh)}; give the model "
                          "the run started from (its init_from)")
    return reference.eval()


def evaluate(cfg: DictConfig | Mapping[str, Any]) -> EvalReport:
    """Evaluate `cfg.ckpt` on `cfg.data`'s split `cfg.split`; writes `cfg.output` (JSON) when set."""
    from zoo.data.sources.base import check_data_cfg, whole_sources
    from zoo.tasks import build_data

    resolved = plain(cfg, "python evaluate.py ckpt=outputs/train/runs/<time>/checkpoints/best.ckpt")
    with bad_input():  # the checks before any model runs: each raises ValueError, here the ConfigError
        EVALUATE_OPTIONS.check("", resolved)
        gen = dict(resolved.get("generation") or {})
        GENERATION_OPTIONS.check("generation", {k: v for k, v in gen.items() if v is not None})
        output = REPORT_OUTPUT.check(resolved["output"]) if resolved.get("output") else None
        model, tokenizer, task, state = open_checkpoint(resolved["ckpt"])
        reference = open_reference(resolved["reference"], model) if resolved.get("reference") else None
        task = task.for_evaluation(model, state, reference)  # task=dpo: its settings, the reference
        data_cfg = resolve_data(resolved["data"], task)
        check_data_cfg(data_cfg)
    whole = resolved["split"] == WHOLE  # every example of the user's file, in the data module's val split
    if whole and data_cfg["name"] not in whole_sources():
        raise ConfigError(f"split={WHOLE} scores a file of yours whole; data={data_cfg['name']} reads none "
                          f"(its splits are fixed: use split=auto, val or test); sources that read a file: "
                          f"{', '.join(whole_sources())}")
    # the data is tokenized with the checkpoint's own tokenizer, read by tokenizer=file from a scratch folder
    # of its own: never a `tokenizer/` next to the output, which may be an export's or the user's
    with tempfile.TemporaryDirectory(prefix="zoo-evaluate-") as scratch:
        tokenizer_dir = tokenizer.save(Path(scratch) / "tokenizer")
        try:
            data_tokenizer, datamodule = build_data(
                data_cfg, {"name": "file", "path": str(tokenizer_dir)}, task=task,
                max_seq_len=model.config.max_seq_len, batch_size=resolved["batch_size"],
                cache_dir=resolved["paths"].get("cache_dir"), seed=resolved["seed"], whole=whole,
            )
            split = "val" if whole else resolve_split(datamodule, resolved["split"])
        except (ValueError, FileNotFoundError) as e:
            raise ConfigError(f"{e} (checkpoint {resolved['ckpt']} holds a model for task "
                              f"{task.name})") from None
    trained, found = tokenizer.label_names, data_tokenizer.label_names
    if found is not None and trained is not None and found != trained and set(found) <= set(trained):
        from zoo.finetune.labels import in_order, reindex

        # the checkpoint's order (a head kept from init_from keeps its folder's id2label order)
        reindex(datamodule, data_tokenizer, in_order(trained, found))
    if data_tokenizer.label_names != tokenizer.label_names:
        raise ConfigError(f"data={data_cfg['name']} has labels {data_tokenizer.label_names}, checkpoint "
                          f"{resolved['ckpt']} was trained on labels {tokenizer.label_names}")
    device = resolved["device"]
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but no CUDA GPU is visible; use device=cpu or auto")
    auto = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(auto if device == "auto" else device)
    metrics = task.evaluate(model, tokenizer, datamodule, split, EvalOptions(resolved["max_examples"], gen))
    metrics = {k: float(v) for k, v in metrics.items()}
    report = EvalReport(resolved["ckpt"], task.name, data_cfg, WHOLE if whole else split, metrics)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(output) as f:
            f.write(report.to_json().encode("utf-8"))
    return report


def report_table(report: EvalReport):
    """A rich table of the report's metrics (printed by evaluate.py)."""
    from rich.table import Table

    table = Table(title=f"{report.task} on {report.data.get('name')}/{report.split} ({report.checkpoint})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in report.metrics.items():
        whole = float(value).is_integer() and abs(value) >= 1
        table.add_row(name, f"{value:,.0f}" if whole else f"{value:.4f}")
    return table
