"""The export formats by name (`FORMATS`; each registers itself in its own module) and the one check of an
export's target folder that they share."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zoo.checkpoint import CheckpointError
from zoo.outputs import Output, OutputError
from zoo.registry import Registry


@dataclass(frozen=True)
class ExportFormat:
    """A folder layout `zoo.export` writes. A re-export replaces the folder as a whole, so a folder may only
    be replaced if it holds nothing beyond `files` and an earlier export of this format `wrote` it."""

    label: str  # in errors: "is not a <label>"
    files: tuple[str, ...]  # every name such a folder may hold
    marks: tuple[str, ...]  # keys its config.json holds (how an earlier export of this format is known)
    write: Callable[..., None]  # (empty folder, model, tokenizer, **options): writes the export there
    options: tuple[str, ...] = ()  # the keyword options `write` takes
    check: Callable[..., None] | None = None  # (**options): refuses bad option values before any read

    def wrote(self, folder: Path) -> bool:
        """Whether an earlier export of this format wrote `folder` (its config.json holds the marks)."""
        try:
            meta = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(meta, dict) and all(key in meta for key in self.marks)


FORMATS: Registry[ExportFormat] = Registry("export format")


def check_target(target: Path, ckpt_path: Path, kind: ExportFormat, key: str = "dir") -> None:
    """Refuse an export folder that re-exporting would lose files from (zoo.outputs' rule: a file, a folder
    that is not an export of this format, one holding files zoo did not write, or the checkpoint being
    exported) or that cannot be written; CheckpointError naming `key` (how the user gave the folder)."""
    try:
        Output(key, f"a {kind.label}", folder=True, ours=kind.wrote).check(target)
    except OutputError as e:
        raise CheckpointError(str(e)) from None
    if not target.exists():
        return
    names = sorted(p.name for p in target.iterdir())
    if target in ckpt_path.resolve().parents:
        raise CheckpointError(
            f"checkpoint {ckpt_path} is inside the export folder {target}, which re-exporting replaces as a "
            f"whole; move the checkpoint out of it or export to another folder."
        )
    foreign = [n for n in names if n not in kind.files]
    if foreign:
        raise CheckpointError(
            f"export folder {target} holds files zoo did not write: {', '.join(foreign)}; re-exporting "
            f"replaces the folder as a whole (allowed: {', '.join(kind.files)}), so move them out or export "
            f"to another folder."
        )
