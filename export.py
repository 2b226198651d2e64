"""Export a checkpoint: `python export.py ckpt=<run>/checkpoints/best.ckpt dir=exported/` writes a zoo export
(model.safetensors, config.json, tokenizer/); `format=hf [model_type=gpt2]` writes a Hugging Face folder that
transformers loads. See docs/training.md and docs/finetune.md."""

from __future__ import annotations

import sys

from zoo.export.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
