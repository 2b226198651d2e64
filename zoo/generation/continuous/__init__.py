"""Continuous batching (core floor, no HTTP): ``engine`` is the one owner of a model that steps a running
batch one token at a time, rows joining and leaving at step boundaries, each row picking its tokens as
`model.generate` does for it alone; ``batch`` keeps the running batch's KV cache, ``penalties`` the per-row
presence / frequency penalties and logit bias, ``raw_logprobs`` the picked tokens' log-probabilities (the
record, ``token_logprob``, is free of torch). The OpenAI server (zoo.serving) and task=grpo's `engine`
rollouts (zoo.tasks.grpo_rollouts) drive it."""
