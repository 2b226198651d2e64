"""zoo models in EleutherAI's lm-evaluation-harness: `zoo.lm_eval.model.ZooLM`, registered with lm-eval as
`--model zoo` (`python -m zoo.lm_eval --model zoo --model_args ckpt=... --tasks ...`; docs/evaluation.md).
Importing this package imports nothing of lm-eval; `zoo.lm_eval.model` does."""
