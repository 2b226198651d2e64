"""Fine-tuning a pretrained model: where its weights come from (`init_from`), which of them train
(`finetune=full|lora|freeze`), and LoRA adapters that merge back into plain weights for export."""

from zoo.finetune.lora import LoRALinear, add_lora, has_lora, lora_target_names, merge_lora
from zoo.finetune.methods import (
           FINETUNES,
           Applied,
           apply_finetune,
           check_finetune,
           trainable_counts,
           trainable_line,
)

__all__ = ["FINETUNES", "Applied", "LoRALinear", "add_lora", "apply_finetune", "check_finetune", "has_lora",
           "lora_target_names", "merge_lora", "trainable_counts", "trainable_line"]
