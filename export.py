"""Export a checkpoint: `python export.py ckpt=<run>/checkpoints/best.ckpt dir=exported/` writes a zoo export
(model.safetensors, config.json, tokenizer/); `format=hf [model_type=gpt2]` writes a Hugging Face folder that
transformers loads. See docs/training.md and docs/finetune.md."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from zoo.training.heap import imports_frozen

    with imports_frozen():
        # opening the checkpoint imports it anyway (a meta-device build: torch.nn.init under a device
        # context): ~120,000 objects to freeze
        import torch._dynamo  # noqa: F401

        from zoo.export.cli import main
    sys.exit(main(sys.argv[1:]))
