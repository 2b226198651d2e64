"""Bad inputs and the one error each gives. The "Bad input" table of docs/training.md is rendered from
these lists: `python -m tests.training.bad_inputs` rewrites it, test_bad_inputs.py checks it is current.

OVERRIDES: `python train.py <overrides>` -> a fragment of the `error:` line; test_bad_inputs.py runs every
row through `prepare` (ConfigError, nothing written). CHECKED_ELSEWHERE: errors that need a run, a
checkpoint or a model first; each row names the test that raises it (file::function), and
test_bad_inputs.py checks that test exists and contains the fragment. Add rows to either list."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from tests.doc_tables import cell, rewrite

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "training.md"
START, END = "<!-- bad-inputs:start -->", "<!-- bad-inputs:end -->"
PREPARE_TEST = "tests/training/test_bad_inputs.py::test_rejected_by_prepare"


@dataclass(frozen=True)
class BadInput:
    """What the user gave, a fragment of the one error it must raise, and the test that checks it."""

    given: str
    message: str
    checked_by: str = PREPARE_TEST

    @property
    def overrides(self) -> list[str]:
        return self.given.split()


OVERRIDES = [BadInput(given, message) for given, message in [
    # misspelled or unknown keys, with or without `+`: every group declares its keys
    ("+batchsize=4", "Unknown key 'batchsize'. Did you mean 'batch_size'?"),
    ("+foo=1", "Unknown key 'foo'. Allowed top-level keys: batch_size, callbacks,"),
    ("+optim.lrr=0.1", "Unknown key 'optim.lrr' (optim=adamw). Did you mean 'optim.lr'?"),
    ("optim.name=adamm", "optim.name: Unknown optimizer 'adamm'. Did you mean 'adamw'?"),
    ("optim.name=muon +optim.ns_steps=0", "optim.ns_steps must be an integer >= 1, got 0"),
    ("optim.name=muon +optim.momentum=1.5", "optim.momentum must be a finite number in [0, 1), got 1.5"),
    ("+compile.enabeld=true", "Unknown key 'compile.enabeld'. Did you mean 'compile.enabled'?"),
    ("+paths.log=x", "Unknown key 'paths.log'. Did you mean 'paths.log_dir'?"),
    ("+trainer.max_stepz=5", "Unknown key 'trainer.max_stepz'. Did you mean 'trainer.max_steps'?"),
    ("+model.n_head=8", "Unknown model config key 'n_head'. Did you mean 'n_heads'?"),
    ("+data.max_byte=1000", "Unknown key 'data.max_byte' (data=stdlib_text). Did you mean 'data.max_bytes'?"),
    ("data=translation_toy +data.max_bytes=1000",
     "Unknown key 'data.max_bytes' (data=translation_toy). Did you mean 'data.max_tokens'? "
     "Allowed data keys:"),
    ("+tokenizer.vocab=300",
     "Unknown key 'tokenizer.vocab' (tokenizer=bpe). Did you mean 'tokenizer.vocab_size'?"),
    ("tokenizer=char +tokenizer.min_frequency=2", "Unknown key 'tokenizer.min_frequency' (tokenizer=char)."),
    ("+logger.projct=zoo", "Unknown key 'logger.projct' (logger=wandb). Did you mean 'logger.project'?"),
    ("logger=csv +logger.project=zoo", "Unknown key 'logger.project' (logger=csv)."),
    ("+scheduler.warmup=10",
     "Unknown key 'scheduler.warmup' (scheduler=cosine). Did you mean 'scheduler.warmup_steps'?"),
    ("scheduler.name=inverse_sqrt",
     "Switch with the config group, e.g. scheduler=inverse_sqrt, not scheduler.name=inverse_sqrt."),
    ("logger.name=csv", "Unknown key 'logger.mode' (logger=csv). Allowed logger keys: name. Switch with the "
                        "config group, e.g. logger=csv, not logger.name=csv."),
    ("+callbacks.checkpoint.monitr=x",
     "Unknown key 'callbacks.checkpoint.monitr'. Did you mean 'callbacks.checkpoint.monitor'?"),
    ("+callbacks.samples.max_new_token=5",
     "Unknown key 'callbacks.samples.max_new_token'. Did you mean 'callbacks.samples.max_new_tokens'?"),
    ("+callbacks.checkpoints.monitor=x", "Unknown callback 'checkpoints'. Did you mean 'checkpoint'?"),
    ("+memory.loss_chunk=8", "Unknown key 'memory.loss_chunk'. Did you mean 'memory.loss_chunk_size'?"),
    ("memory.loss_chunk_size=0", "memory.loss_chunk_size must be null or an integer >= 1, got 0"),
    ("model=bert_small memory.loss_chunk_size=64",
     "memory.loss_chunk_size=64 applies to task=lm|sft, not task=mlm"),
    ("callbacks.checkpoint.monitor=val/bleu",
     "callbacks.checkpoint.monitor=val/bleu is never logged by task=lm."),
    ("callbacks.checkpoint.monitor=val/los",
     "callbacks.checkpoint.monitor=val/los is never logged by task=lm. Did you mean 'val/loss'?"),
    ("model=transformer_tiny callbacks.checkpoint.monitor=val/chrf callbacks.exact_match=null",
     "callbacks.checkpoint.monitor=val/chrf is logged by the exact_match callback, which is switched off"),
    # unknown names inside a group
    ("task=lmm", "Unknown task 'lmm'. Did you mean 'lm'?"),
    ("model.arch=decoderr", "model.arch: Unknown arch 'decoderr'. Did you mean 'decoder'?"),
    ("model.positional=ropee", "model.positional: Unknown positional 'ropee'. Did you mean 'rope'?"),
    ("model.dropout=1.5", "model.dropout must be in [0, 1), got 1.5"),
    ("model=llama3_2_1b model.positional.scaling=longrope",  # the preset's llama3 keys go with its subtree
     "model.positional.scaling=longrope needs model.positional.scaling.original_max_len, the context length "
     "the model was pretrained at"),
    ("data=stdlib_text data.name=stdlib", "Unknown data source 'stdlib'. Did you mean 'stdlib_text'?"),
    ("tokenizer.name=bp", "Unknown tokenizer 'bp'. Did you mean 'bpe'?"),
    ("logger.name=wand", "Unknown logger 'wand'. Did you mean 'wandb'?"),
    ("scheduler.name=cosinus", "Unknown scheduler 'cosinus'. Did you mean 'cosine'?"),
    # values out of range or of the wrong type
    ("seed=abc", "seed must be an integer >= 0 and <= 4294967295, got 'abc'"),
    ("batch_size=0", "batch_size must be an integer >= 1, got 0"),
    ("eval_every=abc", "eval_every must be an integer >= 1, got 'abc'"),
    ("label_smoothing=2.0", "label_smoothing must be a finite number in [0, 1), got 2.0"),
    ("label_smoothing=0.1", "label_smoothing=0.1 applies to task=seq2seq only, not task=lm"),
    ("optim.lr=-1", "optim.lr must be a finite number > 0, got -1"),
    ("optim.lr=abc", "optim.lr must be a finite number > 0, got 'abc'"),
    ("optim.lr=nan", "optim.lr must be a finite number > 0, got nan"),
    ("optim.name=sgd", "optim.name: Unknown optimizer 'sgd'. Allowed: adamw, adamw_fused, muon."),
    ("optim.betas=[0.9]", "optim.betas must be a list of 2, each a finite number in [0, 1), got [0.9]"),
    ("optim.weight_decay=-0.1", "optim.weight_decay must be a finite number >= 0, got -0.1"),
    ("compile.enabled=yes", "compile.enabled must be true, false or auto, got 'yes'"),
    ("compile.backend=inductr", "compile.backend must be one of"),
    ("trainer.devices=0",
     "trainer.devices must be an integer >= 1 or a non-empty list of device indices or one of 'auto', got 0"),
    ("trainer=ddp_cpu trainer.devices=3",
     "data.shards: the training token stream is cut into 8 part(s), which 3 processes cannot share"),
    ("trainer.max_steps=0", "trainer.max_steps must be an integer >= 1, got 0"),
    ("trainer.accumulate_grad_batches=abc",
     "trainer.accumulate_grad_batches must be an integer >= 1, got 'abc'"),
    ("trainer.gradient_clip_val=abc", "trainer.gradient_clip_val must be null or a finite number, got 'abc'"),
    ("trainer.accelerator=cpuu", "trainer.accelerator must be one of 'auto', 'gpu', "),
    ("trainer.strategy=dpp", "trainer.strategy must be one of 'auto', 'ddp', "),
    ("trainer=fsdp optim.name=muon",
     "optim.name=muon orthogonalises whole matrices and trainer.strategy=fsdp splits them across processes"),
    ("trainer=fsdp_tp trainer.tp_size=4", "trainer.tp_size=4 is larger than the world of 2 process(es)"),
    ("trainer=fsdp_tp trainer.devices=3", "trainer.tp_size=2 does not divide the world of 3 processes"),
    ("model=gpt_nano trainer=fsdp_tp trainer.devices=4 trainer.tp_size=4",
     "trainer.tp_size=4 does not divide model.n_heads=2"),
    ("model=gpt_nano model.n_heads=4 model.n_kv_heads=1 trainer=fsdp_tp",
     "trainer.tp_size=2 does not divide model.n_kv_heads=1"),
    ("model=gpt_nano model.d_ff=65 trainer=fsdp_tp", "trainer.tp_size=2 does not divide model.d_ff=65"),
    ("model=gpt_nano model.ffn_ratio=1.03125 trainer=fsdp_tp",
     "trainer.tp_size=2 does not divide model.d_ff=33 (model.ffn_ratio=1.03125 x model.d_model=32)"),
    ("model=gpt_nano model.positional=t5_relative trainer=fsdp_tp",
     "trainer.strategy=fsdp_tp cannot split model.positional: t5_relative learns a bias table with one "
     "column per head"),
    ("model=gpt_nano model.mixer.qk_norm=true model.mixer.qk_norm_scope=all trainer=fsdp_tp",
     "trainer.strategy=fsdp_tp cannot split model.mixer.qk_norm_scope: all normalises over every head"),
    ("model=moe_small model.ffn.expert_d_ff=33 trainer=fsdp_tp",
     "trainer.tp_size=2 does not divide model.ffn.expert_d_ff=33"),
    ("model=mla_small trainer=fsdp_tp",
     "trainer.strategy=fsdp_tp cannot split model.mixer: mla: its latent and rope key (kv_a, one norm over "
     "the whole latent) serve every head"),
    # multi-head latent attention (model.mixer=mla): sizes that do not compress, schemes it cannot carry
    ("model=mla_small model.n_kv_heads=2",
     "model.n_kv_heads=2 is attention's; model.mixer=mla has one latent for all heads"),
    ("model=mla_small model.head_dim=32", "model.head_dim=32 is attention's; model.mixer=mla"),
    ("model=mla_small model.mixer.kv_lora_rank=512",
     "model.mixer.kv_lora_rank=512 must be smaller than the keys and values it compresses: model.n_heads x "
     "(qk_nope_head_dim + v_head_dim) = 8 x (32 + 32) = 512"),
    ("model=mla_small model.mixer.q_lora_rank=256",
     "model.mixer.q_lora_rank=256 must be smaller than what it compresses: model.d_model=256"),
    ("model=mla_small model.mixer.qk_rope_head_dim=15",
     "model.mixer.qk_rope_head_dim must be an even integer >= 2 (RoPE rotates pairs), got 15"),
    ("model=mla_small model.positional=alibi",
     "model.mixer=mla carries position by rotating its model.mixer.qk_rope_head_dim features, which "
     "model.positional=alibi does not do; choose model.positional=rope"),
    ("model=mla_small model.positional.fraction=0.5",
     "model.positional.fraction=0.5: model.mixer=mla rotates all of its model.mixer.qk_rope_head_dim "
     "features"),
    # Gated DeltaNet (model.mixer=gated_deltanet): heads that do not group, schemes and stacks it cannot carry
    ("model=gpt_nano model.mixer={name:gated_deltanet,linear_num_key_heads:3}",
     "model.mixer.linear_num_value_heads=32 is not divisible by model.mixer.linear_num_key_heads=3"),
    ("model=gpt_nano model.mixer=gated_deltanet model.positional=rope",
     "model.positional=rope acts inside attention (rotating q/k or biasing scores), which "
     "model.mixer=gated_deltanet does not have"),
    ("model=gpt_nano model.mixer=gated_deltanet model.n_kv_heads=1",
     "model.n_kv_heads=1 is attention's; model.mixer=gated_deltanet sizes its heads"),
    ("model=bert_small model.mixer=gated_deltanet",
     "model.mixer=gated_deltanet reads the tokens left to right only, and arch='encoder' has a "
     "bidirectional"),
    ("model=gpt_nano model.mixer=gated_deltanet trainer=fsdp_tp",
     "trainer.strategy=fsdp_tp cannot split model.mixer: gated_deltanet: its q/k/v convolution"),
    # LFM2's short convolution (model.mixer / model.linear_mixer=short_conv): positions, heads, stacks, splits
    ("model=gpt_nano model.mixer=short_conv model.positional=rope",
     "model.positional=rope acts inside attention (rotating q/k or biasing scores), which "
     "model.mixer=short_conv does not have"),
    ("model=gpt_nano model.mixer=short_conv model.n_kv_heads=1",
     "model.n_kv_heads=1 is attention's; model.mixer=short_conv has no heads"),
    ("model=lfm2_small model.linear_mixer.conv_L_cache=0",
     "model.linear_mixer.conv_L_cache must be an integer >= 1"),
    ("model=t5_small model.linear_mixer=short_conv model.layer_pattern=[linear,full]",
     "model.linear_mixer=short_conv reads the tokens left to right only, and arch='encoder_decoder' has a "
     "bidirectional"),
    ("model=qwen3_5_small model.linear_mixer.norm_placement=inside",
     "model.linear_mixer.norm_placement='inside' is not a residual wiring; choose one of"),
    ("model=qwen3_5_small model.linear_mixer.norm_placement=post_sublayer model.first_attn_norm=false",
     "model.first_attn_norm=false drops layer 0's attention input norm, but "
     "model.linear_mixer.norm_placement='post_sublayer' has no input norm"),
    ("model=lfm2_small trainer=fsdp_tp",
     "trainer.strategy=fsdp_tp cannot split model.linear_mixer: short_conv: its in_proj rows [b | c | h]"),
    # multi-token prediction (model.mtp): its keys, and a task without next-token targets
    ("model=bert_small model.mtp=sequential",
     "model.mtp=sequential trains on each position's next tokens, which task=mlm does not give"),
    ("model=gpt_nano model.mtp={name:sequential,depth:0}",
     "model.mtp.depth must be an integer >= 1 and <= 16, got 0"),
    ("model=gpt_nano model.mtp=sequential model.mtp.weight=-1",
     "model.mtp.weight must be a finite number >= 0, got -1"),
    ("model=gpt_nano model.mtp=parallel", "model.mtp: Unknown mtp 'parallel'. Allowed: sequential."),
    ("model=gpt_nano model.mixer.output_gate=true trainer=fsdp_tp",
     "trainer.strategy=fsdp_tp cannot split model.mixer.output_gate: true adds a gate projection"),
    ("trainer=fsdp_tp optim.name=muon",
     "optim.name=muon orthogonalises whole matrices and trainer.strategy=fsdp_tp splits them"),
    ("trainer=fsdp +trainer.tp_size=2",
     "trainer.tp_size applies to trainer.strategy=fsdp_tp (e.g. trainer=fsdp_tp), not trainer.strategy=fsdp"),
    ("+trainer.sharded_checkpoint=true",
     "trainer.sharded_checkpoint applies to trainer.strategy=fsdp|fsdp_tp (e.g. trainer=fsdp), not "
     "trainer.strategy=auto"),
    ("trainer.accelerator=cpu trainer.precision=16-mixed", "trainer.precision=16-mixed needs a GPU"),
    ("trainer.precision=fp8", "trainer.precision='fp8' is unknown; allowed: auto, 32-true"),
    ("scheduler.warmup_steps=abc", "scheduler.warmup_steps must be an integer, got 'abc'"),
    ("scheduler.warmup_steps=-1", "scheduler.warmup_steps must be >= 0, got -1"),
    ("scheduler.min_lr_ratio=2", "scheduler.min_lr_ratio must be in [0, 1], got 2"),
    ("scheduler=inverse_sqrt scheduler.warmup_steps=0",
     "scheduler=inverse_sqrt needs scheduler.warmup_steps >= 1"),
    ("data=stdlib_text data.mask_prob=2", "data.mask_prob must be a finite number in (0, 1), got 2"),
    ("+data.mask_prob=0", "data.mask_prob must be a finite number in (0, 1), got 0"),
    ("data=stdlib_text data.max_bytes=abc", "data.max_bytes must be null or an integer, got 'abc'"),
    ("data=stdlib_text data.num_workers=-1", "data.num_workers must be an integer >= 0, got -1"),
    ("data=text", "data=text needs data.files"),
    ("tokenizer=file", "tokenizer=file needs tokenizer.path"),
    ("tokenizer.vocab_size=10",
     "tokenizer.vocab_size=10 is smaller than the byte alphabet (256) + 5 special tokens"),
    ("logger.mode=onlin", "logger.mode must be one of 'auto', 'online', 'offline', 'disabled', got 'onlin'"),
    ("logger.tags=x", "logger.tags must be null or a list, each a string, got 'x'"),
    ("paths.log_dir=1", "paths.log_dir must be a string, got 1"),
    ("callbacks.checkpoint.mode=lowest",
     "callbacks.checkpoint.mode must be one of 'min', 'max', got 'lowest'"),
    ("callbacks.tokens_per_s.window=0", "callbacks.tokens_per_s.window must be an integer >= 1, got 0"),
    ("callbacks.samples.top_k=-1", "callbacks.samples.top_k must be null or an integer >= 0, got -1"),
    ("callbacks.samples.prompts=def", "callbacks.samples.prompts must be a list, each a string, got 'def'"),
    ("+callbacks.samples.enabled=no", "callbacks.samples.enabled must be true or false, got 'no'"),
    # combinations that cannot train
    ("model.n_heads=5", "not divisible"),
    ("model.n_layers=10000000000", "model.n_layers must be <= 4096 (a layer count, not a size), got 10000000000"),
    ("model.n_layers=4000 model.d_model=6144",
     "model.n_layers=4000, model.d_model=6144, model.n_heads=6 (head size 1024), model.vocab_size=8192 "
     "need at least"),
    ("task=seq2seq", "task=seq2seq needs model.arch in ['encoder_decoder'], but model.arch=decoder"),
    ("model=transformer_tiny task=sft data=chat data.path=chats.jsonl",
     "task=sft needs model.arch in ['decoder'], but model.arch=encoder_decoder; fine-tune an encoder-decoder "
     "on prompt/completion pairs with task=seq2seq data=pairs data.path=pairs.jsonl data.src_field=prompt "
     "data.tgt_field=completion"),
    ("task=classification model=bert_small", "task=classification needs model.head=classifier"),
    ("task=token_classification model=bert_small",
     "task=token_classification needs model.head=token_classifier"),
    ("task=question_answering model=bert_small model.head=qa",
     "task=question_answering has no built-in data; name one, e.g. data=squad data.path=..."),
    ("data=squad data.path=x.jsonl data.doc_stride=-1",
     "data.doc_stride must be null or an integer >= 0, got -1"),
    ("task=mlm model=bert_small model.head={name:classifier,num_labels:2}", "task=mlm needs model.head=lm"),
    ("model=transformer_tiny model.head=classifier",
     "model.head='classifier' is not available on arch 'encoder_decoder', "
     "which carries model.head=lm | none"),
    ("model=bert_small model.head={name:classifier,num_labels:2,pool:max}",
     "model.head.pool: Unknown pooling 'max'. Allowed: first, last, mean"),
    ("model=bert_small model.head={name:classifier,num_labels:2,bias:true}",
     "model.head=classifier has no key 'bias'. model.head.bias is read by head=lm: choose it with "
     "model.head=lm (a new name replaces the whole model.head)"),
    ("model=bert_small model.first_attn_norm=false",
     "model.first_attn_norm=false drops layer 0's attention input norm, but model.norm_placement='post' has "
     "no input norm of the attention alone; it applies to norm_placement parallel | pre | sandwich"),
    ("ckpt_path=/nonexistent/last.ckpt", "checkpoint not found"),
    ("finetune=freeze finetune.modules=[embed,decoder_stack,head]",
     "finetune=freeze finetune.modules=['embed', 'decoder_stack', 'head'] finetune.first_layers=0 leaves no "
     "parameter to train (frozen: embed, decoder_stack, head); freeze less of the model (its parts: embed, "
     "decoder_stack, head)"),
    # finetune=qlora: every layer it holds in 4 bits must split into whole NF4 blocks of a row
    ("model=gpt_nano finetune=qlora",
     "finetune=qlora: layer decoder_stack.layers.0.self_attn.qkv cannot be held in NF4: finetune.block_size=64 "
     "does not divide its 32 input features (block sizes allowed: 32)"),
    ("finetune=qlora finetune.block_size=48",
     "finetune.block_size must be one of 32, 64, 128, 256, 512, 1024, 2048, 4096, got 48"),
    ("model=bigram optim.name=muon",
     "optim.name=muon trains the weight matrices of the attention and feed-forward layers of the stacks, "
     "and this model has none (model.arch=decoder, model.n_layers=0); use optim.name=adamw"),
    ("model=mlp_lm optim.name=muon",
     "optim.name=muon trains the weight matrices of the attention and feed-forward layers of the stacks, "
     "and this model has none (model.arch=mlp_lm); use optim.name=adamw"),
    ("optim.name=muon finetune=freeze finetune.modules=[decoder_stack]",
     "optim.name=muon trains the weight matrices of the attention and feed-forward layers of the stacks, and "
     "finetune freezes all of them; use optim.name=adamw"),
    ("ckpt_path=last", "ckpt_path=last: no earlier run with checkpoints/last.ckpt"),
    ("model=moe_small model.layer_pattern={prefix:[dense,dense,dense,dense],cycle:[moe]}",
     "model.layer_pattern={'prefix': ['dense', 'dense', 'dense', 'dense'], 'cycle': ['moe']} tags every one "
     "of the 4 layers dense, so ffn=moe would train a dense model"),
    # DeepSeek's group-limited routing: the groups must split the experts and hold top_k of them
    ("model=moe_small model.ffn.router={name:sigmoid_bias,n_group:3}",
     "model.ffn.router.n_group=3 does not divide model.ffn.n_experts=8"),
    ("model=moe_small model.ffn.router={name:group_limited_greedy,n_group:4,topk_group:5}",
     "model.ffn.router.topk_group=5 exceeds model.ffn.router.n_group=4"),
    ("model=moe_small model.ffn.top_k=4 model.ffn.router={name:sigmoid_bias,n_group:4,topk_group:1}",
     "model.ffn.top_k=4 exceeds the 2 experts the kept groups hold (model.ffn.router.topk_group=1 of "
     "n_group=4 groups of 2)"),
    # a key or layer tag only an entry that is not chosen reads (docs/design.md, "Config parts")
    ("model=gpt_nano model.layer_pattern=[rope,nope]",
     "model.layer_pattern=['rope', 'nope'] tags layers 'nope', which needs a rotary scheme "
     "(model.positional=learned does not rotate)"),
    ("model=llama_small +model.positional.scaling.factor=2.0",
     "model.positional.scaling=none has no key 'factor'. model.positional.scaling.factor is read by "
     "positional.scaling=linear|llama3|yarn: choose it with model.positional.scaling=linear"),
    # task=dpo's settings group (zoo/tasks/dpo.py, dpo_losses.py): checked by the task, refused for others
    ("task=dpo data=preference data.path=pairs.jsonl dpo.beta=0",
     "dpo.beta must be a finite number > 0, got 0"),
    ("task=dpo data=preference data.path=pairs.jsonl +dpo.gamma=1",
     "Unknown key 'dpo.gamma'. Allowed dpo keys: beta, label_smoothing, loss_type, reference, sft_weight"),
    ("task=dpo data=preference data.path=pairs.jsonl dpo.reference=cached",
     "dpo.reference must be one of 'live', 'precomputed', got 'cached'"),
    ("task=lm dpo.beta=0.2", "dpo.* applies to task=dpo only, not task=lm"),
    # task=grpo's settings group (zoo/tasks/grpo.py, grpo_losses.py, rewards.py): checked before any data
    ("task=grpo data=prompts data.path=prompts.jsonl",
     "grpo.rewards is empty: name at least one reward (answer_match, format, length_penalty, or "
     "'module:function')"),
    ("task=grpo data=prompts data.path=prompts.jsonl grpo.rewards=[mypkg_zz.rewards:fmt]",
     "grpo.rewards: cannot import module 'mypkg_zz.rewards' of reward 'mypkg_zz.rewards:fmt'"),
    ("task=grpo data=prompts data.path=prompts.jsonl grpo.rewards=[answer_mach]",
     "grpo.rewards: 'answer_mach' is neither a registered reward (answer_match, format, length_penalty) nor "
     "a 'module:function' path"),
    ("task=grpo data=prompts data.path=prompts.jsonl grpo.rewards=[answer_match] grpo.num_generations=1",
     "grpo.num_generations=1 with grpo.scale_rewards=group: a group of one completion has no std to divide "
     "by"),
    ("task=grpo data=prompts data.path=prompts.jsonl grpo.rewards=[answer_match] grpo.loss_type=ppo",
     "grpo.loss_type: Unknown GRPO loss 'ppo'"),
    ("task=grpo data=prompts data.path=prompts.jsonl grpo.rewards=[answer_match] grpo.reward_weights=[1,2]",
     "grpo.reward_weights has 2 values for 1 grpo.rewards: give one weight per reward"),
    ("task=grpo data=prompts data.path=prompts.jsonl grpo.rewards=[answer_match] model=bert_small",
     "task=grpo needs model.arch in ['decoder'], but model.arch=encoder"),
    ("task=lm grpo.num_generations=4", "grpo.* applies to task=grpo only, not task=lm"),
]]

CHECKED_ELSEWHERE = [
    # Gated DeltaNet: what needs a built model
    BadInput("KVCache.crop(n) of a gated_deltanet / short_conv cache to a length whose state it did not keep "
             "(KVCache.keep_states)",
             "keeps its states after the last 2 tokens of each forward",
             "tests/generation/test_recurrent_modes.py::test_a_crop_past_what_was_kept_is_one_error"),
    BadInput("model.mixer=gated_deltanet data.document_mask=true",
             "model.mixer=gated_deltanet carries one state along each row",
             "tests/modules/test_gated_deltanet_model.py::test_packed_documents_are_refused_naming_the_mixer"),
    # LFM2 (model.linear_mixer=short_conv): what needs a built model or a folder
    BadInput("model=lfm2_small, packed documents (document_ids)",
             "model.linear_mixer=short_conv carries one state along each row",
             "tests/modules/test_short_conv_model.py::test_packed_documents_are_refused_naming_the_mixer"),
    BadInput("zoo.from_pretrained(<an lfm2 folder with layer_types other than conv / full_attention>)",
             "each of conv, full_attention",
             "tests/pretrained/test_lfm2.py::test_what_zoo_cannot_express_is_one_error"),
    BadInput("zoo.from_pretrained(<an lfm2_moe folder with use_expert_bias: false>)",
             "use_expert_bias=False (supported: True)",
             "tests/pretrained/test_lfm2_moe.py::test_routing_without_the_expert_bias_is_one_error"),
    BadInput("zoo.save_pretrained(<a short_conv hybrid whose attention has no q/k norm>, model_type='lfm2')",
             "its config.json cannot express model.mixer.qk_norm=False",
             "tests/pretrained/test_lfm2.py::test_a_model_lfm2_cannot_carry_is_refused_on_export_naming_the_key"),
    # a key only an entry that is not chosen reads (docs/design.md, "Config parts")
    BadInput("ckpt_path=<a gpt_nano run's last.ckpt> model.n_heads=4",
             "model.n_heads: checkpoint 2, this run 4",
             "tests/training/test_run.py::test_resume_from_other_architecture_is_refused_before_training"),
    BadInput("ckpt_path=<a trainer=fsdp run's sharded last.ckpt folder> trainer=cpu",
             "is a sharded checkpoint (a folder of shards): resume it with trainer=fsdp",
             "tests/training/test_sharding.py::test_sharded_checkpoint_resumes_only_under_fsdp"),
    # resume, validation, cache
    BadInput("ckpt_path=<run> with a same-size tokenizer trained on other text",
             "ids stand for other tokens",
             "tests/training/test_resume.py::test_resume_with_a_same_size_tokenizer_of_other_text_is_refused"),
    BadInput("ckpt_path=<a finetune=freeze run> finetune.modules=<other parts, even as many>",
             "this run freezes decoder_stack.layers.1: what trains cannot change on resume (the optimizer "
             "state",
             "tests/finetune/test_resume.py::test_resume_that_changes_what_trains_is_refused"),
    BadInput("finetune=qlora without bitsandbytes installed",
             "finetune=qlora quantises the base with bitsandbytes, which cannot be imported",
             "tests/finetune/test_qlora.py::test_missing_bitsandbytes_is_one_error_naming_it"),
    BadInput("finetune=qlora on a model with no linear layer outside its head",
             "Sequential has no nn.Linear layer outside its output head to",
             "tests/finetune/test_qlora.py::test_a_model_with_no_linear_layer_to_quantize_is_refused"),
    BadInput("ckpt_path=<a finetune=freeze run> finetune=full",
             "trained with decoder_stack.layers.0 frozen, this run freezes nothing: ",
             "tests/finetune/test_resume.py::test_resume_that_changes_what_trains_is_refused"),
    BadInput("a NaN validation batch", "non-finite validation loss",
             "tests/training/test_checkpoints.py::test_nan_validation_stops_before_its_checkpoints"),
    BadInput("a NaN validation batch with callbacks.non_finite=null (a warning)",
             "val/loss=nan at step 3: best.ckpt is not updated",
             "tests/training/test_checkpoints.py::test_nan_validation_without_the_stop_warns_and_is_never_best"),
    BadInput("ZOO_CACHE_DIR=<a file, a read-only folder, a path under a file>",
             "ZOO_CACHE_DIR=",
             "tests/data/test_cache.py::test_unusable_cache_dir_env_is_one_error_naming_it_before_any_work"),
    # checkpoints and weights (zoo.load, generate.py, train.py ckpt_path=)
    BadInput("a .ckpt with a wrong-shaped tensor", "the weights do not fit",
             "tests/test_checkpoint_errors.py::test_wrong_shaped_tensor_is_named_by_every_reader"),
    BadInput("a .ckpt with missing / unknown tensors",
             "1 missing tensor: decoder_stack.final_norm.weight; 1 unknown tensor",
             "tests/test_checkpoint_errors.py::test_missing_and_unknown_tensors_are_listed"),
    BadInput("a .ckpt without zoo.model_config", "zoo.model_config is missing or not a mapping",
             "tests/test_checkpoint_errors.py::test_missing_or_invalid_model_config_is_named"),
    BadInput("a truncated .ckpt", "is not a readable PyTorch file",
             "tests/test_checkpoint_errors.py::test_truncated_checkpoint_names_the_file"),
    BadInput("a .ckpt pickle that needs code to load", "never unpickles untrusted code",
             "tests/test_checkpoint_errors.py::test_pickle_needing_code_is_refused_without_torchs_retry_advice"),
    BadInput("an export whose config.json is not JSON / has no model_config", "config.json is not valid JSON",
             "tests/test_checkpoint_errors.py::test_bad_export_config_names_the_file"),
    BadInput("an export with a wrong-shaped tensor", "model.safetensors does not fit",
             "tests/test_checkpoint_errors.py::test_wrong_shaped_export_tensor_is_named"),
    BadInput("zoo.from_pretrained: config.json without n_embd",
             "has no 'n_embd', which a gpt2 checkpoint needs",
             "tests/pretrained/test_errors.py::test_missing_config_key_names_file_and_key"),
    BadInput("zoo.from_pretrained: a truncated model.safetensors", "is not a readable safetensors file",
             "tests/pretrained/test_errors.py::test_truncated_weights_name_the_file"),
    BadInput("zoo.from_pretrained: a shard index pointing outside its folder",
             "names shard files outside its folder",
             "tests/pretrained/test_errors.py::test_shard_names_must_stay_in_the_folder"),
    BadInput("zoo.from_pretrained: config.json and weights from different saves",
             "zoo_save_id",
             "tests/pretrained/test_save_atomic.py::test_config_and_weights_of_different_saves_are_refused"),
    BadInput("zoo.from_pretrained / init_from=<a folder whose config.json says num_hidden_layers=1000000 "
             "beside 2 layers of weights (single file, sharded index or pytorch_model.bin)>",
             "config.json num_hidden_layers=1000000 (model.n_layers) disagrees with the weights",
             "tests/pretrained/test_header_sizes.py::test_a_million_layers_is_refused_from_the_headers"),
    BadInput("zoo.from_pretrained: config.json hidden_size / intermediate_size / vocab_size other than its "
             "weights'", "config.json hidden_size=320 (model.d_model)",
             "tests/pretrained/test_header_sizes.py::test_a_width_is_named_by_its_key_before_the_model_is_built"),
    BadInput("zoo.from_pretrained: a qwen2 config.json whose layer_types names another kind than "
             "full_attention / sliding_attention",
             "layer_types (full_attention or sliding_attention, one per layer)=False (supported: True)",
             "tests/pretrained/test_qwen.py::test_qwen2_layer_kinds_zoo_cannot_reproduce_are_named"),
    BadInput("zoo.from_pretrained: a qwen2_moe / qwen3_moe config.json with decoder_sparse_step 0",
             "decoder_sparse_step (a positive integer)=False",
             "tests/pretrained/test_qwen_moe.py::test_what_qwen2_moe_cannot_say_is_named"),
    BadInput("zoo.from_pretrained: a deepseek_v3 config.json with topk_method / scoring_func other than "
             "V3's (noaux_tc, sigmoid)", "topk_method='greedy' (supported: 'noaux_tc')",
             "tests/pretrained/test_deepseek.py::test_routing_zoo_cannot_reproduce_is_named"),
    BadInput("zoo.from_pretrained: a deepseek_v2 config.json with norm_topk_prob true (transformers' V2 "
             "never renormalises) or an unknown topk_method", "norm_topk_prob=True (supported: False)",
             "tests/pretrained/test_deepseek.py::test_v2_settings_zoo_cannot_reproduce_are_named"),
    BadInput("zoo.from_pretrained: a glm4_moe_lite config.json whose mlp_layer_types names another kind than "
             "dense / sparse", "mlp_layer_types (dense or sparse, one per layer)=False",
             "tests/pretrained/test_deepseek.py::test_glm_layer_types_zoo_cannot_reproduce_are_named"),
    BadInput("zoo.from_pretrained: a qwen3_5_text / qwen3_5 / qwen3_next config.json with attention_bias "
             "true, a rope_type other than default, or a layer_types kind other than linear_attention / "
             "full_attention", "layer_types (linear_attention or full_attention, one per layer)=False",
             "tests/pretrained/test_qwen_hybrid.py::test_what_zoo_cannot_express_is_one_error"),
    BadInput("zoo.from_pretrained: a qwen3_next config.json with full_attention_interval 0",
             "full_attention_interval (a positive integer)=False",
             "tests/pretrained/test_qwen_hybrid.py::test_what_zoo_cannot_express_is_one_error"),
    BadInput("zoo.from_pretrained: an olmo_hybrid config.json with attention_bias true, a hidden_act other "
             "than silu, a rope_type other than default, or a layer_types kind other than linear_attention / "
             "full_attention", "olmo_hybrid config.json uses settings zoo does not support",
             "tests/pretrained/test_olmo_hybrid.py::test_what_zoo_cannot_express_is_one_error"),
    BadInput("zoo.from_pretrained: an olmo_hybrid config.json whose linear_num_value_heads differs from "
             "linear_num_key_heads (transformers' layer repeats no key head)",
             "linear_num_value_heads == linear_num_key_heads",
             "tests/pretrained/test_olmo_hybrid.py::test_what_zoo_cannot_express_is_one_error"),
    BadInput("zoo.save_pretrained model_type=olmo_hybrid of a Gated DeltaNet hybrid whose linear layers keep "
             "the spine's wiring (model.linear_mixer.norm_placement null)",
             "cannot be exported as 'olmo_hybrid': its config.json cannot express model.linear_mixer=",
             "tests/pretrained/test_olmo_hybrid.py::"
             "test_a_hybrid_without_the_linear_layers_wiring_is_refused_on_export"),
    BadInput("zoo.from_pretrained: a qwen3_5 / qwen3_5_moe folder whose text_config is not a mapping",
             "qwen3_5 config.json's text_config must be a mapping",
             "tests/pretrained/test_qwen_hybrid.py::test_a_text_config_that_is_not_a_mapping_is_named"),
    BadInput("zoo.from_pretrained: an FP8 folder (quantization_config.quant_method fp8) whose "
             "weight_block_size is not two positive integers",
             "config.json quantization_config.weight_block_size=[128]",
             "tests/pretrained/test_fp8.py::test_a_block_size_zoo_cannot_read_is_named"),
    BadInput("zoo.save_pretrained model_type=deepseek_v3 of an mla model whose latent norms use norm_eps "
             "1e-5 (transformers' keep 1e-6)",
             "cannot express model.mixer.latent_norm_eps=1e-05 (would load as 1e-06)",
             "tests/pretrained/test_deepseek.py::"
             "test_a_model_trained_in_zoo_exports_where_its_latent_norms_agree"),
    # multi-token prediction: what needs a model or a folder
    BadInput("zoo.build of model.mtp on an encoder (or encoder_decoder) stack",
             "model.mtp=sequential predicts later tokens of a decoder's own",
             "tests/modules/test_mtp.py::test_bad_settings_are_one_error_naming_the_key"),
    BadInput("zoo.build of model.mtp under a head other than lm",
             "model.mtp=sequential shares the vocabulary head",
             "tests/modules/test_mtp.py::test_bad_settings_are_one_error_naming_the_key"),
    BadInput("model(..., output_mtp=True) of a model without model.mtp", "output_mtp=True needs model.mtp",
             "tests/modules/test_mtp.py::test_output_mtp_needs_the_modules_and_no_cache"),
    BadInput("zoo.from_pretrained of a DeepSeek-V3 folder whose MTP layer's token-table copy differs from "
             "the model's", "differs from the model's",
             "tests/pretrained/test_deepseek_mtp.py::"
             "test_a_copy_of_the_token_table_that_differs_is_refused"),
    BadInput("zoo.from_pretrained of a DeepSeek-V3 folder whose num_nextn_predict_layers is not the MTP "
             "layers its weights hold", "disagrees with the weights: they hold multi-token-prediction",
             "tests/pretrained/test_deepseek_mtp.py::test_a_count_the_weights_do_not_hold_is_named"),
    BadInput("zoo.from_pretrained of a GLM-4.7-Flash folder whose MTP layer's FFN kind the layer pattern "
             "does not tile to", "multi-token-prediction layer 3 holds a Mixture of Experts",
             "tests/pretrained/test_deepseek.py::test_multi_token_prediction_layers_are_left_out"),
    BadInput("zoo.save_pretrained / export.py format=hf model_type=roberta of a model whose head activation "
             "RoBERTa cannot write", "model.head.activation='relu'",
             "tests/export/test_hf_loads.py::test_a_refused_activation_is_named_not_shown_as_a_function"),
    # exports
    BadInput("zoo.export into a folder holding the user's files", "holds files zoo did not write",
             "tests/test_checkpoint_export.py::test_user_files_in_an_export_folder_are_kept_and_the_export_refused"),
    BadInput("zoo.export of a checkpoint inside the export folder", "is inside the export folder",
             "tests/test_checkpoint_export.py::test_exporting_a_checkpoint_that_lives_in_the_export_folder_is_refused"),
    BadInput("python export.py ckpt=<a missing file> dir=out", "checkpoint not found: ",
             "tests/export/test_cli.py::test_bad_input_is_one_error_line"),
    BadInput("python export.py ckpt=... dir=out format=onnx",
             "Unknown export format 'onnx'. Allowed: gguf, hf, zoo.",
             "tests/export/test_cli.py::test_bad_input_is_one_error_line"),
    # GGUF export (issue 40): options before the checkpoint is read, the rest before the file is written
    BadInput("python export.py ckpt=... dir=out format=gguf dtype=q5_k",
             "GGUF export dtype='q5_k' is not supported; allowed: f32, f16, q8_0, q4_0.",
             "tests/export/test_cli.py::test_bad_input_is_one_error_line"),
    BadInput("python export.py ckpt=... dir=out format=gguf model_type=olmo2",
             "GGUF export does not support the 'olmo2' family; supported: llama, mistral, qwen2, qwen3, phi3, "
             "gpt2, ",
             "tests/export/test_cli.py::test_bad_input_is_one_error_line"),
    BadInput("python export.py ckpt=<a tokenizer=char run> dir=out format=gguf",
             "the char tokenizer is a WordLevel model; GGUF export carries byte-level BPE tokenizers only",
             "tests/export/test_cli.py::test_bad_input_is_one_error_line"),
    BadInput("export.py format=gguf of a model with a knob llama.cpp has no key for (model.mixer.sinks; also "
             "softcap, qk_norm_scope=all, RoPE scaling, interleaved RoPE, a sliding window)",
             "model.mixer.sinks=True (would load as False)",
             "tests/export/test_gguf.py::test_a_knob_llama_cpp_has_no_key_for_is_named_before_anything_is_written"),
    BadInput("export.py format=gguf of a classifier", "this model has model.head='classifier'",
             "tests/export/test_gguf.py::test_a_knob_llama_cpp_has_no_key_for_is_named_before_anything_is_written"),
    BadInput("export.py format=gguf with a tokenizer.json that normalizes (Qwen2's NFC)",
             "normalizes text first (NFC), which llama.cpp's BPE does not do",
             "tests/export/test_gguf.py::test_a_tokenizer_llama_cpp_cannot_express_is_refused_by_name"),
    BadInput("export.py format=gguf with a BPE whose split is none of llama.cpp's named pre-tokenizers",
             "splits text with a pre-tokenizer llama.cpp has no name for",
             "tests/export/test_gguf.py::test_a_tokenizer_llama_cpp_cannot_express_is_refused_by_name"),
    BadInput("export.py format=gguf of a model with fewer embedding rows than its tokenizer has tokens",
             "GGUF needs a token for every row",
             "tests/export/test_gguf.py::test_a_tokenizer_and_model_that_do_not_belong_together_are_refused"),
    BadInput("export.py format=gguf of a model whose bos / eos / pad id is not its tokenizer's",
             "model.bos_id=7",
             "tests/export/test_gguf.py::test_a_tokenizer_and_model_that_do_not_belong_together_are_refused"),
    BadInput("zoo.from_pretrained(<a .gguf of an architecture zoo does not read>)",
             "zoo reads GGUF architectures llama, qwen2, qwen3, ",
             "tests/pretrained/test_gguf.py::test_a_gguf_of_an_architecture_zoo_does_not_read_is_named"),
    BadInput("zoo.from_pretrained(<a .gguf missing a key of its architecture>)",
             "its llama metadata does not describe a model zoo ",
             "tests/pretrained/test_gguf.py::test_a_gguf_without_the_keys_of_its_architecture_is_named"),
    BadInput("python export.py ckpt=... dir=out model_type=gpt2 (an option of format=hf only)",
             "export format 'zoo' has no option 'model_type'",
             "tests/export/test_cli.py::test_bad_input_is_one_error_line"),
    BadInput("python export.py dir=out (no ckpt=)", "ckpt is required; usage: python export.py ckpt=",
             "tests/export/test_cli.py::test_bad_input_is_one_error_line"),
    BadInput("zoo.export into another format's export folder", "exists and is not a",
             "tests/export/test_formats.py::test_a_format_replaces_only_its_own_exports"),
    # user-named outputs (zoo.outputs): a new path, or what zoo wrote there itself (issue 41)
    BadInput("python -m zoo.training.consolidate ckpt=<sharded> out=<a file zoo did not write>",
             "exists and is not a consolidated zoo checkpoint",
             "tests/training/test_consolidate.py::test_a_users_file_is_refused_by_name_and_kept"),
    BadInput("python -m zoo.training.consolidate ckpt=<sharded> out=<a folder>",
             "is a folder, not a file (a consolidated zoo checkpoint",
             "tests/training/test_consolidate.py::test_a_folder_or_a_path_under_a_file_is_one_clear_error"),
    BadInput("python export.py ckpt=... dir=<a path under a file>", "is a file, not a folder; choose a new",
             "tests/export/test_cli.py::test_bad_input_is_one_error_line"),
    BadInput("python export.py ckpt=... dir=<in a folder that cannot be written>",
             "no permission to write in",
             "tests/export/test_cli.py::test_a_folder_that_cannot_be_written_is_named_before_the_export"),
    BadInput("python evaluate.py ckpt=... output=<a file zoo did not write>",
             "exists and is not an evaluate.py report",
             "tests/evaluation/test_outputs.py::"
             "test_output_onto_a_users_file_is_refused_before_the_checkpoint_is_read"),
    BadInput("python evaluate.py ckpt=... data=stdlib_text split=all (built-in data: no file of yours)",
             "split=all scores a file of yours whole; data=stdlib_text reads none",
             "tests/evaluation/test_whole_file.py::test_split_all_on_built_in_data_is_one_error"),
    BadInput("python evaluate.py ckpt=... data=squad data.path=... data.val_path=... split=all",
             "the data is read whole",
             "tests/evaluation/test_whole_file.py::test_split_all_with_a_separate_validation_file_is_one_error"),
    BadInput("python -m zoo.embedding ... output=<a file zoo did not write>",
             "exists and is not an embeddings file",
             "tests/pretrained/test_embed_cli.py::test_cli_output_onto_a_users_file_is_refused_before_the_model_is_read"),
    BadInput("zoo.save_pretrained(model, <a folder whose config.json or weights are not a checkpoint's>)",
             "exists and is not a model checkpoint folder",
             "tests/pretrained/test_save_atomic.py::"
             "test_save_into_a_folder_whose_config_or_weights_are_the_users_is_refused"),
    BadInput("python inspect_model.py ... html=<a file zoo did not write>",
             "exists and is not an explorer page",
             "tests/inspection/test_cli.py::test_html_replaces_only_its_own_earlier_page"),
    BadInput("python inspect_model.py ... out_dir=<a folder holding a user's trace.json or a plot's name>",
             "exists and is not a folder of zoo's inspection plots",
             "tests/inspection/test_cli.py::test_out_dir_replaces_only_its_own_trace_and_plots"),
    # data=hf, batching, init_from (issue 28)
    BadInput("data=hf data.path=<an empty or whitespace-only .jsonl / .csv / .txt>", "is empty (no rows)",
             "tests/data/sources/test_hf.py::test_an_empty_file_is_named"),
    BadInput("data=hf data.path=<a .txt / .jsonl / .csv with a latin-1 byte>",
             "not valid UTF-8 at byte offset",
             "tests/data/sources/test_hf.py::test_a_file_that_is_not_utf8_names_the_byte_offset_like_data_text"),
    BadInput("data=hf data.val_split=<a split save_to_disk wrote with no rows>", "has no rows",
             "tests/data/sources/test_hf.py::test_an_empty_saved_split_is_named"),
    BadInput("data=hf task=classification data.val_split=<a split whose ClassLabel is -1 (no label) in "
             "every row>",
             "has no labelled rows", "tests/data/sources/test_hf.py::"
             "test_a_split_of_only_unlabelled_rows_is_refused_naming_the_column"),
    BadInput("data.max_tokens=<fewer tokens than one example>", "is smaller than one example",
             "tests/data/test_batching.py::test_max_tokens_below_one_example_is_refused_when_batches_are_planned"),
    BadInput("init_from=<a folder whose own tokenizer has more tokens than its embedding>",
             "so the two do not belong together", "tests/finetune/test_bad_input.py::"
             "test_own_tokenizer_larger_than_the_embedding_is_refused_before_any_data"),
    BadInput("init_from=<folder> tokenizer=hf tokenizer.path=<a tokenizer larger than its embedding>",
             "the tokenizer given (tokenizer=hf) has 340 tokens", "tests/finetune/test_bad_input.py::"
             "test_given_tokenizer_larger_than_the_embedding_is_refused_before_any_data"),
    BadInput("init_from= / evaluate.py ckpt= <a text file, even one starting with 'd'>",
             "is not a PyTorch checkpoint",
             "tests/test_checkpoint_errors.py::test_a_text_file_is_not_a_pytorch_checkpoint_whatever_its_first_letter"),
    BadInput("zoo.from_pretrained / init_from=<a BART or T5 folder of *ForSequenceClassification / "
             "*ForQuestionAnswering>", "zoo's encoder_decoder carries model.head=lm | none",
             "tests/pretrained/test_heads.py::test_a_class_transformers_has_and_zoo_does_not_load_is_named_with_why"),
    BadInput("init_from=<a BertModel folder> task=token_classification model.head.pooler=relu",
             "model.head=token_classifier has no key 'pooler'. model.head.pooler is read by "
             "head=classifier|none",
             "tests/pretrained/test_init_from_head_keys.py::test_an_override_of_a_key_the_head_does_not_read_is_refused"),
    BadInput("init_from=<a *ForSequenceClassification / *ForTokenClassification folder> with data labels its "
             "id2label lacks", "that the folder's head does not",
             "tests/finetune/test_labels.py::test_labels_the_folder_lacks_are_one_clear_error"),
    # token classification / question answering data
    BadInput("data=token_tags: a tag that is not IOB2 (line 2: \"PER\")",
             "is not an IOB2 tag; allowed: 'O', 'B-<type>'",
             "tests/tasks/test_token_classification.py::test_bad_jsonl_names_line_and_field"),
    BadInput("data=token_tags: fewer tags than words", "must hold one tag per word",
             "tests/tasks/test_token_classification.py::test_bad_jsonl_names_line_and_field"),
    BadInput("data=squad: answer_start + len(text) past the context's end",
             "runs past the end of the context",
             "tests/tasks/test_question_answering.py::test_bad_answer_names_the_example_and_field"),
    BadInput("data=squad: answers.text not the context's text at answer_start",
             "is not the context's text at",
             "tests/tasks/test_question_answering.py::test_bad_answer_names_the_example_and_field"),
    BadInput("task=question_answering: a question that leaves no room in model.max_seq_len",
             "special tokens no context fits",
             "tests/tasks/test_question_answering.py::test_a_question_that_leaves_no_room_and_a_stride_too_long_are_refused"),
    # generation
    BadInput("generate(..., use_cache=\"no\") / do_sample=\"yes\"", "must be True or False, got",
             "tests/generation/test_errors.py::test_true_false_options_reject_strings_and_numbers"),
    BadInput("generate.py prompts_file=<not UTF-8>", "is not UTF-8 text",
             "tests/generation/test_cli.py::test_prompts_file_that_is_not_utf8_is_named"),
    BadInput("generate.py device=cuda (no GPU)", "is not available on this machine; available: cpu",
             "tests/generation/test_cli.py::test_unavailable_device_is_named_before_loading"),
    BadInput("generate.py chat=true messages_file=<a JSON object, not a list>", "must be a non-empty list",
             "tests/generation/test_cli.py::test_chat_errors_are_named"),
    BadInput("generate.py chat=true messages_file=<a message with role \"wizard\">",
             "role must be one of system, user, assistant, tool",
             "tests/generation/test_cli.py::test_chat_errors_are_named"),
    BadInput("generate.py chat=true with a tokenizer folder that has no chat_template",
             "tokenizer has no chat template", "tests/generation/test_cli.py::test_chat_errors_are_named"),
    BadInput("generate.py system=... without chat=true", "is for chat; add chat=true",
             "tests/generation/test_cli.py::test_chat_errors_are_named"),
    BadInput("generate.py chat=true prompt=... continue_final_message=true (no messages_file)",
             "continue_final_message=true continues the last message",
             "tests/generation/test_cli.py::test_chat_continues_the_final_message"),
    # weight-only quantisation (zoo.quantize, generate.py / serve.py quantize=...; issue 40)
    BadInput("zoo.quantize(model, \"int3\") / generate.py quantize=int3",
             "Unknown quantization method 'int3'",
             "tests/quantization/test_options.py::test_bad_quantize_keys_are_refused_before_loading"),
    BadInput("generate.py / serve.py quantize=int8 quantize_group_size=64 (a key int8 does not read)",
             "is not read by quantize=int8",
             "tests/quantization/test_options.py::test_bad_quantize_keys_are_refused_before_loading"),
    BadInput("generate.py quantize_group_size=64 (or quantize_head=false, ...) without quantize=",
             "configures quantize=...; give quantize=int8 or",
             "tests/quantization/test_options.py::test_bad_quantize_keys_are_refused_before_loading"),
    BadInput("zoo.quantize(model, \"int4\", group_size=48) / quantize=int4 quantize_group_size=48",
             "is not one torch's int4 CPU kernel takes",
             "tests/quantization/test_options.py::test_bad_quantize_keys_are_refused_before_loading"),
    BadInput("zoo.quantize(model, \"int8\", group_size=32) (an option another method reads)",
             "'int8' has no option 'group_size'; its options: none",
             "tests/quantization/test_api.py::test_quantize_bad_input"),
    BadInput("generate.py / serve.py quantize=int4 device=cuda", "runs on torch's CPU kernel only",
             "tests/quantization/test_options.py::test_a_cpu_only_method_on_another_device_is_refused"),
    BadInput("quantize=int4 on a model with a layer whose in_features the group size does not divide",
             "is not a multiple of group_size",
             "tests/quantization/test_options.py::test_generate_quantized_matches_the_library"),
    BadInput("zoo.quantize(model, \"int4\") on a layer whose out_features is not a multiple of 16",
             "out_features 40 is not a multiple of 16",
             "tests/quantization/test_api.py::test_quantize_bad_input"),
    BadInput("zoo.quantize(model, \"int8\") on a layer whose in_features is not a multiple of 16",
             "in_features 24 is not a multiple of 16",
             "tests/quantization/test_api.py::test_quantize_bad_input"),
    # the key=value command lines without Hydra (generate.py, serve.py, python -m zoo.embedding; issue 41)
    BadInput("generate.py num_beams=many / serve.py port='def f(x):' (a typed key's value not of its type)",
             "is not an integer",
             "tests/test_cli_args.py::test_an_unreadable_typed_value_is_one_error_naming_the_key"),
    BadInput("generate.py prompt=a prompt=b (any of these command lines: a key given twice)",
             "prompt= is given twice",
             "tests/generation/test_cli_text.py::test_typed_values_read_as_hydra_reads_them"),
    BadInput("serve.py =x (an argument without a key)", "Arguments are key=value, got '=x'",
             "tests/test_cli_args.py::test_an_argument_without_a_key_is_named"),
    BadInput("generate.py / serve.py / python -m zoo.embedding / export.py / python -m "
             "zoo.training.consolidate ckpt= (a path key given empty: ckpt, dir, out, hf, folder, input, "
             "output, *_file)",
             "='' is not a non-empty path.",
             "tests/test_cli_args.py::test_the_five_command_lines_word_an_unknown_key_and_a_bad_value_alike"),
    BadInput("python export.py ... modeltype=gpt2 (a key export.py does not have)",
             "Unknown key 'modeltype'. Did you mean 'model_type'? Known keys: ckpt, dir, format, dtype, "
             "model_type.",
             "tests/export/test_cli.py::test_bad_input_is_one_error_line"),
    BadInput("zoo.build(..., dropout=10**400) (an int past float range for a number key)",
             "model.dropout must be in [0, 1), got",
             "tests/test_fuzz_cli.py::test_a_number_rule_refuses_an_int_past_float_range_naming_the_key"),
    BadInput("a chat template's raise_exception (Gemma given a system message)",
             "chat template: System role not supported",
             "tests/tokenizers/test_chat.py::test_gemma_refuses_a_system_message_with_its_own_words"),
    # sentence embeddings (zoo.embed, zoo.load_embedder, python -m zoo.embedding)
    BadInput("zoo.embed(..., pooling=\"meen\") / python -m zoo.embedding pooling=avg",
             "Unknown sentence pooling",
             "tests/pretrained/test_embed.py::test_unknown_pooling_is_refused_before_the_weights_are_read"),
    BadInput("zoo.load_embedder(<a sentence-transformers folder with a Dense module>)",
             "modules zoo does not run",
             "tests/pretrained/test_embed.py::test_a_pipeline_zoo_does_not_run_is_refused_by_name"),
    BadInput("python -m zoo.embedding input=<an empty file>", "holds no text",
             "tests/pretrained/test_embed_cli.py::test_cli_bad_arguments_are_one_error_each"),
    BadInput("python -m zoo.embedding output=emb.csv", "must end in",
             "tests/pretrained/test_embed_cli.py::test_cli_bad_arguments_are_one_error_each"),
    # lm-evaluation-harness (python -m zoo.lm_eval --model zoo --model_args ...)
    BadInput("python -m zoo.lm_eval --model zoo --model_args ckpt=<a missing file>",
             "checkpoint not found",
             "tests/lm_eval/test_model.py::test_the_command_line_prints_bad_model_args_as_one_error_line"),
    BadInput("python -m zoo.lm_eval --model zoo --model_args ckpt=...,pretrained=gpt2",
             "the zoo lm-eval model has no argument 'pretrain",
             "tests/lm_eval/test_model.py::test_bad_arguments_are_one_error_each"),
    BadInput("python -m zoo.lm_eval --model zoo --batch_size auto",
             "batch_size must be an integer >= 1 for the zoo lm-eval model",
             "tests/lm_eval/test_model.py::test_bad_arguments_are_one_error_each"),
    BadInput("python -m zoo.lm_eval --model zoo --apply_chat_template (a tokenizer without a chat template)",
             "--apply_chat_template: this char tokenizer has no chat templ",
             "tests/lm_eval/test_model.py::test_apply_chat_template_refusals_are_one_error_each"),
    BadInput("python -m zoo.lm_eval --model zoo --apply_chat_template tools (no template of that name)",
             "chat template 'tools': this tokenizer's templates are",
             "tests/lm_eval/test_model.py::test_apply_chat_template_refusals_are_one_error_each"),
    BadInput("an lm-eval task whose gen_kwargs hold num_beams",
             "does not support the generation option 'num_beams'",
             "tests/lm_eval/test_model.py::test_bad_arguments_are_one_error_each"),
    # silent no-ops and resumes that would do something else (issue 41 items 6, 12, 13)
    BadInput("data=token_tags data.val_path=<a file with a tag no training sentence has>",
             "tag 'B-LOC' is in the validation data but not in the training data",
             "tests/tasks/test_token_classification.py::"
             "test_a_tag_found_only_in_validation_is_refused_naming_it_the_file_and_line"),
    BadInput("ckpt_path=<an LM run's checkpoint> eval_every=<another value>",
             "eval_every=3 makes an epoch of 24 training windows",
             "tests/training/test_resume_refusals.py::test_resume_with_another_eval_every_is_refused_by_name"),
    BadInput("ckpt_path=<a checkpoint at its run's trainer.max_steps> (a finished run)",
             "is finished: it is at",
             "tests/training/test_resume_refusals.py::"
             "test_resuming_a_finished_run_says_it_is_finished_and_how_to_continue"),
    BadInput("ckpt_path=last with no earlier run of this run's architecture and task",
             "model trained on task seq2seq; it found: ",
             "tests/training/test_resume_refusals.py::"
             "test_ckpt_path_last_without_a_run_of_this_model_names_what_it_found"),
    BadInput("python -m zoo.lm_eval --tasks hellaswag (offline: its data is on the Hub)",
             "Couldn't reach 'Rowan/hellaswag' on the Hub",
             "tests/lm_eval/test_model.py::test_a_hub_task_offline_is_one_error_line_saying_how_to_run_it"),
    # serve.py and its HTTP API: nothing one request sends stalls the others (issue 41 items 2, 5, 8)
    BadInput("python serve.py ckpt=... host=0.0.0.0 (no api_key= nor ZOO_API_KEY)",
             "host=0.0.0.0 accepts connections from other machines, and no API key",
             "tests/serving/test_cli.py::test_bad_options_fail_before_anything_is_opened"),
    BadInput("python serve.py ckpt=... api_key=", "api_key must not be empty",
             "tests/serving/test_cli.py::test_bad_options_fail_before_anything_is_opened"),
    BadInput("python serve.py ckpt=... max_body_mb=0", "max_body_mb must be a number of MiB > 0",
             "tests/serving/test_cli.py::test_bad_options_fail_before_anything_is_opened"),
    BadInput("python serve.py ckpt=... prepare_workers=0", "prepare_workers must be an integer >= 1",
             "tests/serving/test_cli.py::test_bad_options_fail_before_anything_is_opened"),
    BadInput("POST /v1/... with a body larger than max_body_mb (413)", "this server accepts at most",
             "tests/serving/test_hostile.py::test_body_past_the_limit_is_413_before_it_is_read"),
    BadInput("POST /v1/... with Content-Type text/plain or none (415)", "Unsupported Content-Type",
             "tests/serving/test_hostile.py::test_only_json_content_is_accepted"),
    BadInput("a request without the server's API key (401)", "Incorrect API key provided",
             "tests/serving/test_hostile.py::test_api_key_is_required_when_set"),
    BadInput("a chat template (or prompt) taking longer than prepare_timeout to render / tokenize (400)",
             "prepare_timeout",
             "tests/serving/test_hostile.py::test_others_keep_their_latency_while_one_request_is_stopped_at_its_budget"),
    BadInput("a chat template raising a Python error: 1/0, range(10**9), {% import %}, recursion (400)",
             "chat template failed",
             "tests/serving/test_hostile.py::test_a_failing_template_is_a_400_naming_its_error"),
    BadInput("a JSON string with a lone surrogate (\\ud800) in a request (400)", "lone surrogate",
             "tests/serving/test_hostile.py::test_json_the_server_cannot_take_is_a_400_saying_why"),
    BadInput("a request body nested 100,000 deep (400)", "nests arrays or objects deeper",
             "tests/serving/test_hostile.py::test_json_the_server_cannot_take_is_a_400_saying_why"),
    BadInput("a request whose sampling settings turn the model's finite logits into NaN while decoding "
             "(400 for it alone; the other rows decode on)", "no probability distribution (NaN)",
             "tests/serving/test_isolation.py::"
             "test_through_the_server_one_failing_request_leaves_the_others_streaming"),
    # prompts and rewards of task=grpo (zoo.data.prompts, zoo.tasks.grpo, zoo.tasks.rewards)
    BadInput("task=grpo data=prompts: a prompt + grpo.max_completion_length over model.max_seq_len",
             "with grpo.max_completion_length=4 it",
             "tests/tasks/test_grpo.py::"
             "test_a_prompt_that_leaves_no_room_for_the_completion_is_refused_before_the_first_step"),
    BadInput("task=grpo data=prompts: a row without the field a reward reads (answer_match: answer)",
             "reward answer_match reads field 'answer', which",
             "tests/tasks/test_grpo.py::"
             "test_a_row_without_the_field_a_reward_reads_is_refused_before_the_first_step"),
    BadInput("data=prompts: a JSONL row without a prompt", "a prompt row needs the field 'prompt'",
             "tests/tasks/test_grpo.py::test_bad_prompt_rows_name_their_line"),
    BadInput("grpo.rewards: a reward function that raises on a row",
             "reward raises_on_seven raised ZeroDivisionError",
             "tests/tasks/test_grpo_rewards.py::test_a_bad_reward_is_one_error_naming_it_and_the_row"),
    BadInput("grpo.rewards: a reward function that returns the wrong number of values",
             "returned 2 values for 3 completions",
             "tests/tasks/test_grpo_rewards.py::test_a_bad_reward_is_one_error_naming_it_and_the_row"),
    BadInput("grpo.rewards: a reward function that returns NaN (or a non-number)", "a finite number",
             "tests/tasks/test_grpo_rewards.py::test_a_bad_reward_is_one_error_naming_it_and_the_row"),
    BadInput("grpo.rewards=[{name: format, pattern: '('}] (no regular expression)", "no regular expression",
             "tests/tasks/test_grpo_rewards.py::test_bad_reward_settings_are_one_clear_error"),
    # preference data and DPO settings (zoo.data.preference, zoo.tasks.dpo_losses; task=dpo data=preference)
    BadInput("task=dpo data=chat data.path=chats.jsonl (data that is not preference pairs)",
             "data=chat gives chat examples, which suit task ['sft'], not task='dpo'",
             "tests/tasks/test_dpo.py::test_dpo_without_preference_data_is_one_error"),
    BadInput("task=dpo data=preference data.truncate=false: a pair longer than model.max_seq_len",
             "set data.truncate=true to cut it, or raise model.max_seq_len",
             "tests/tasks/test_dpo.py::test_long_pairs_are_cut_or_refused"),
    BadInput("task=dpo data=preference: a prompt of model.max_seq_len tokens or more",
             "leaves no room for a completion",
             "tests/tasks/test_dpo.py::test_long_pairs_are_cut_or_refused"),
    BadInput("evaluate.py ckpt=<a task=dpo checkpoint> without reference=",
             "give reference=<the model the DPO run started from",
             "tests/evaluation/test_whole_file.py::test_split_all_scores_every_row_of_the_file"),
    BadInput("evaluate.py ckpt=<a task=dpo checkpoint> reference=<a model of another shape, or no model>",
             "do not fit",
             "tests/evaluation/test_dpo_checkpoint.py::"
             "test_a_reference_for_another_task_or_that_does_not_fit_is_one_error"),
    BadInput("evaluate.py ckpt=<a checkpoint of another task> reference=...",
             "reference= applies to task=dpo checkpoints",
             "tests/evaluation/test_dpo_checkpoint.py::"
             "test_a_reference_for_another_task_or_that_does_not_fit_is_one_error"),
    BadInput("evaluate.py ckpt=<a task=dpo checkpoint saved before zoo kept dpo.*> reference=...",
             "does not record its dpo",
             "tests/evaluation/test_dpo_checkpoint.py::"
             "test_a_reference_for_another_task_or_that_does_not_fit_is_one_error"),
    BadInput("task=dpo dpo.reference=precomputed ckpt_path=<a checkpoint of a dpo.reference=live run>",
             "holds no precomputed reference log-probs",
             "tests/training/test_resume_post_training.py::test_dpo_precomputed_reference_trains_as_the_live_one"),
    BadInput("zoo.data.preference.read_preference_jsonl: prompt text beside chosen / rejected messages",
             "chosen and rejected must all be text or all",
             "tests/tasks/test_dpo_messages.py::test_bad_conversational_row_is_one_error_naming_file_and_line"),
    BadInput("zoo.data.preference.read_preference_jsonl: messages with no prompt (none given or shared)",
             "needs a prompt",
             "tests/tasks/test_dpo_messages.py::test_bad_conversational_row_is_one_error_naming_file_and_line"),
    BadInput("zoo.data.preference.read_preference_jsonl: a completion that is not the assistant's turn",
             "the chosen completion starts with a tool turn",
             "tests/tasks/test_dpo_messages.py::test_bad_conversational_row_is_one_error_naming_file_and_line"),
    BadInput("zoo.data.preference.read_preference_jsonl: chosen and rejected the same messages",
             "chosen and rejected are the same messages",
             "tests/tasks/test_dpo_messages.py::test_bad_conversational_row_is_one_error_naming_file_and_line"),
    BadInput("zoo.data.preference.read_preference_jsonl: 'tools' on a text row",
             "field 'tools' is read only with messages",
             "tests/tasks/test_dpo_messages.py::test_bad_conversational_row_is_one_error_naming_file_and_line"),
    BadInput("zoo.data.preference.read_preference_jsonl: a row whose chosen equals its rejected",
             "chosen and rejected are the same text 'a'",
             "tests/tasks/test_dpo_data.py::test_bad_row_is_one_error_naming_file_and_line"),
    BadInput("zoo.data.preference.read_preference_jsonl: an empty completion",
             "the chosen completion is empty",
             "tests/tasks/test_dpo_data.py::test_bad_row_is_one_error_naming_file_and_line"),
    BadInput("zoo.data.preference.read_preference_jsonl: a row of no preference format ({\"text\": ...})",
             "needs the fields prompt/chosen/rejected or chosen/rejected",
             "tests/tasks/test_dpo_data.py::test_bad_row_is_one_error_naming_file_and_line"),
    BadInput("zoo.tasks.dpo_losses.dpo_settings: loss_type=sigmod", "Unknown DPO loss 'sigmod'",
             "tests/tasks/test_dpo_losses.py::test_settings_defaults_and_refusals"),
    BadInput("zoo.tasks.dpo_losses.dpo_settings: label_smoothing=0.1 with loss_type=sigmoid",
             "only dpo.loss_type=robust reads it",
             "tests/tasks/test_dpo_losses.py::test_settings_defaults_and_refusals"),
    # task=sft data=chat (zoo/data/chat_rows.py, chat_masks.py, chat_packing.py): one error naming file:line
    BadInput("task=sft data=chat: a conversation without an assistant turn",
             "a conversation without an assistant turn",
             "tests/tasks/test_sft_masks.py::test_bad_rows_name_file_and_line"),
    BadInput("task=sft data=chat: roles out of order (an assistant first, a system turn later)",
             "roles out of order: messages",
             "tests/tasks/test_sft_masks.py::test_bad_rows_name_file_and_line"),
    BadInput("task=sft data=chat: an empty completion", "empty completion",
             "tests/tasks/test_sft_masks.py::test_bad_rows_name_file_and_line"),
    BadInput("task=sft data=chat: a row without messages, prompt/completion or text",
             "a row of no known format", "tests/tasks/test_sft_masks.py::test_bad_rows_name_file_and_line"),
    BadInput("task=sft data=chat: a template that cannot mark the assistant (no {% generation %}, earlier "
             "turns rewritten)", "the chat template cannot mark the assistant",
             "tests/tasks/test_sft_masks.py::test_template_that_rewrites_earlier_turns_is_refused"),
    BadInput("task=sft data=chat data.loss_mask=assistant_only on a text row",
             "data.loss_mask=assistant_only applies to conversation",
             "tests/tasks/test_sft_masks.py::test_mask_that_does_not_fit_the_format_is_refused"),
    BadInput("task=sft data=chat data.truncate=false: a row longer than model.max_seq_len + 1 tokens",
             "data.truncate=true", "tests/tasks/test_sft.py::test_long_rows_are_cut_and_counted_or_refused"),
    BadInput("task=sft data=chat data.loss_mask=assistant", "data.loss_mask: Unknown loss mask 'assistant'",
             "tests/tasks/test_sft_masks.py::test_unknown_loss_mask_is_named"),
    BadInput("task=sft data=chat: an assistant turn whose reasoning_content is not text (a list, a number)",
             "reasoning_content must be text",
             "tests/tasks/test_sft_masks.py::test_reasoning_content_that_is_not_text_is_refused"),
]


def render() -> str:
    """The markdown table, markers included."""
    lines = [START, "| bad input (`python train.py ...` unless said) | error (fragment) | checked by |",
             "|---|---|---|"]
    for row in [*OVERRIDES, *CHECKED_ELSEWHERE]:
        test_file, test = row.checked_by.split("::")
        by = "`prepare`" if row.checked_by == PREPARE_TEST else f"`{Path(test_file).name}::{test}`"
        lines.append(f"| `{cell(row.given)}` | {cell(row.message)} | {by} |")
    return "\n".join([*lines, END])


def main() -> int:
    """Rewrite the table in docs/training.md (`python -m tests.training.bad_inputs`)."""
    rewrite(DOC, START, END, render)
    print(f"{DOC}: {len(OVERRIDES) + len(CHECKED_ELSEWHERE)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
