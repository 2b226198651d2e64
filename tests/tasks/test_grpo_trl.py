"""GRPO against trl's GRPOTrainer: a tiny zoo Llama exported to Hugging Face (save_pretrained), fp32, no
dropout; the same prompts and the same completions fed to both (trl's sampler replaced by a function that
returns them: nothing is sampled), the same rewards (zoo's answer_match and a user function, called by trl
as it calls reward functions). trl then computes, with its own code, the rewards and group-relative
advantages, the sampling policy's log-probs (num_iterations=2), the reference's (beta > 0, its frozen copy)
and the loss (`_compute_loss`: its fused LM head at the sampling temperature; with and without its KL bias
correction, trl's default); zoo computes the same with
zoo.tasks.rewards, grpo_losses and grpo_batch on the zoo model. Over two optimisation steps on the batch
(each side stepping its own model with its own gradients, so the second step's ratio is not 1), the loss
and every parameter's gradient agree within 1e-5 for loss_type grpo and dapo.

This drives trl internals of the 1.16 line: GRPOTrainer._generate (replaced), _generate_and_score_completions
and _compute_loss, not trl's `train()` loop (whose sampler, scheduler and accumulation are the Trainer's)."""

from __future__ import annotations

import copy

import pytest
import torch

import zoo
from zoo.pretrained.api import export_family
from zoo.tasks.grpo_batch import RolloutBatch, completion_logps, pad_rows
from zoo.tasks.grpo_losses import LossSettings, Rollouts, group_advantages, grpo_loss
from zoo.tasks.rewards import build_rewards, score, weighted

PROMPTS = [("1+2=", "3"), ("4+4=", "8")]  # equal lengths in tokens: HF scores left-padded rows at shifted
#                                           positions (no position_ids from the mask), zoo as if unpadded
COMPLETIONS = [["3", "4 or 3", "12"], ["8", "nine", "8 8 8 8 8"]]  # per prompt; the last is cut at 6 tokens
G, TEMPERATURE, BETA, LR, MAX_TOKENS = 3, 0.7, 0.04, 0.5, 6


def char_tokenizer():
    """A character-level Hugging Face fast tokenizer with <pad> 0 and <eos> 1."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set("0123456789+= abcdefghijklmnopqrstuvwxyz"))
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{c: i + 3 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>",
                                   unk_token="<unk>")


def hf_grads(model) -> dict[str, torch.Tensor]:
    """The zoo model's gradients under Hugging Face's tensor names (the export's own mapping)."""
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    return export_family(model).state_to_hf(grads, model.config)


@pytest.mark.e2e
@pytest.mark.parametrize("corrected", [True, False], ids=["kl_ratio", "kl"])
@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_grpo_loss_and_gradients_equal_trl(tmp_path, loss_type, corrected):
    datasets = pytest.importorskip("datasets")
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from tests.tasks.grpo_user_rewards import length_bonus

    torch.manual_seed(0)
    tokenizer = char_tokenizer()
    model = zoo.build("llama_small", vocab_size=len(tokenizer), d_model=32, n_layers=2, n_heads=4,
                      n_kv_heads=2, d_ff=48, max_seq_len=64, dropout=0.0).float()
    zoo.save_pretrained(model, tmp_path / "hf")
    hf_model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32)
    reference = copy.deepcopy(model).eval().requires_grad_(False)

    rewards = build_rewards(["answer_match", "tests.tasks.grpo_user_rewards:length_bonus"], [1.0, 0.5])
    args = GRPOConfig(output_dir=str(tmp_path / "trl"), report_to=[], use_cpu=True, bf16=False, fp16=False,
                      per_device_train_batch_size=G * len(PROMPTS), num_generations=G, num_iterations=2,
                      loss_type=loss_type, beta=BETA, temperature=TEMPERATURE, epsilon=0.2, epsilon_high=0.28,
                      max_completion_length=MAX_TOKENS, reward_weights=[1.0, 0.5], logging_steps=1,
                      use_bias_correction_kl=corrected)
    rows = [{"prompt": p, "answer": a} for p, a in PROMPTS]
    trainer = GRPOTrainer(model=hf_model, reward_funcs=[rewards[0].fn, length_bonus], args=args,
                          train_dataset=datasets.Dataset.from_list(rows), processing_class=tokenizer)
    trl_model = trainer.model
    trl_model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by trl's train loop

    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    prompts = [p for p, _ in PROMPTS for _ in range(G)]  # each prompt's group consecutive, as trl's sampler
    texts = [c for group in COMPLETIONS for c in group]
    completion_ids = [(encode(c) + [tokenizer.eos_token_id])[:MAX_TOKENS] for c in texts]
    shown = [tokenizer.decode(ids, skip_special_tokens=True) for ids in completion_ids]
    prompt_ids = [encode(p) for p in prompts]
    trainer._generate = lambda given: (prompt_ids, completion_ids, None, shown, None, None, None, None)
    trl_inputs = trainer._generate_and_score_completions([{"prompt": p, "answer": a} for p, a in PROMPTS
                                                          for _ in range(G)])

    # zoo: the same rollouts scored, advantages, old and reference log-probs
    per_reward = score(rewards, prompts, shown, completion_ids, {"answer": [a for _, a in PROMPTS
                                                                            for _ in range(G)]})
    advantages = group_advantages(weighted(per_reward, rewards), G, "group")
    pid, pmask = pad_rows(prompt_ids, tokenizer.pad_token_id, "left")
    cid, cmask = pad_rows(completion_ids, tokenizer.pad_token_id, "right")
    batch = RolloutBatch(pid, pmask, cid, cmask, advantages)
    assert torch.equal(trl_inputs["completion_mask"], cmask) and torch.equal(trl_inputs["prompt_ids"], pid)
    torch.testing.assert_close(trl_inputs["advantages"], advantages, rtol=0, atol=1e-6)
    assert advantages.abs().sum() > 0
    with torch.no_grad():
        old, _ = completion_logps(model, batch, TEMPERATURE)
        ref, _ = completion_logps(reference, batch, TEMPERATURE)
    for name, ours in (("old_per_token_logps", old), ("ref_per_token_logps", ref)):
        torch.testing.assert_close(trl_inputs[name] * cmask, ours * cmask, rtol=0, atol=1e-5)
    settings = LossSettings(loss_type=loss_type, epsilon=0.2, epsilon_high=0.28, beta=BETA,
                            max_completion_length=MAX_TOKENS, use_bias_correction_kl=corrected)

    for step in range(2):
        trl_loss = trainer._compute_loss(trl_model, trl_inputs)
        trl_loss.backward()
        logps, _ = completion_logps(model, batch, TEMPERATURE)
        loss = grpo_loss(Rollouts(logps, cmask.to(logps), advantages, old_logps=old, ref_logps=ref,
                                  tokens=cmask.sum()), settings)
        loss.backward()
        assert float(loss.detach()) == pytest.approx(float(trl_loss.detach()), abs=1e-5), step
        ours = hf_grads(model)
        theirs = {name: p.grad for name, p in trl_model.named_parameters()}
        assert set(ours) == set(theirs)
        for name, grad in ours.items():
            torch.testing.assert_close(grad, theirs[name], rtol=0, atol=1e-5, msg=f"{step} {name}")
        with torch.no_grad():  # each side steps its own model with its own gradients
            for p in [*model.parameters(), *trl_model.parameters()]:
                p -= LR * p.grad
                p.grad = None
    ratio = torch.exp(completion_logps(model, batch, TEMPERATURE)[0].detach() - old)
    assert ((ratio - 1).abs() * cmask).max() > 0.01  # the second step ran off the sampling policy
