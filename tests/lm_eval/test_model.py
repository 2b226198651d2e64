"""ZooLM's text -> ids split, on hand-worked cases with a character tokenizer: a context's trailing spaces
belong to the continuation and an empty context is the prefix token, as lm-eval's hf model splits them; the
score is the model's own log-softmax read at the continuation's positions. And its bad arguments."""

from __future__ import annotations

import pytest
import torch
from lm_eval.api.instance import Instance

import zoo
from zoo.lm_eval.model import ModelArgsError, ZooLM
from zoo.tokenizers import build_tokenizer


@pytest.fixture(scope="module")
def lm() -> ZooLM:
    tokenizer = build_tokenizer({"name": "char"}, ["ab c"])
    torch.manual_seed(0)
    model = zoo.build("gpt2", vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2,
                      max_seq_len=16)
    return ZooLM.from_model(model, tokenizer, batch_size=2, device="cpu")


def by_hand(lm: ZooLM, context: list[int], continuation: list[int]) -> float:
    ids = torch.tensor([context + continuation])
    logp = torch.log_softmax(lm.model(ids).logits[0].float(), -1)  # (T, V)
    return sum(float(logp[len(context) - 1 + k, t]) for k, t in enumerate(continuation))


def test_trailing_context_spaces_move_to_the_continuation_and_empty_context_is_bos(lm):
    a, b, space, c = (lm.tokenizer.encode(ch)[0] for ch in "ab c")
    bos = lm.tokenizer.bos_id
    requests = [Instance("loglikelihood", {}, (ctx, cont), 0) for ctx, cont in
                [("ab ", "c"), ("", "ab"), ("ab", " c")]]
    got = lm.loglikelihood(requests, disable_tqdm=True)
    want = [by_hand(lm, [a, b], [space, c]), by_hand(lm, [bos], [a, b]), by_hand(lm, [a, b], [space, c])]
    assert [g for g, _ in got] == pytest.approx(want, abs=1e-5)
    assert got[0] == got[2]  # "ab " + "c" is "ab" + " c"


def test_bad_arguments_are_one_error_each(lm, tmp_path):
    with pytest.raises(ValueError, match="exactly one of ckpt=<checkpoint or zoo export folder> and hf="):
        ZooLM()
    with pytest.raises(ModelArgsError, match="ckpt=x.ckpt: the zoo lm-eval model has no argument 'pretrain"):
        ZooLM(ckpt="x.ckpt", pretrained="gpt2")
    with pytest.raises(ModelArgsError, match=f"ckpt={tmp_path}/x.ckpt: checkpoint not found"):
        ZooLM(ckpt=str(tmp_path / "x.ckpt"))
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1 for the zoo lm-eval model, got"):
        ZooLM.from_model(lm.model, lm.tokenizer, batch_size="auto")
    encoder = zoo.build("bert_small", vocab_size=lm.tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2)
    with pytest.raises(ValueError, match="this model is arch=encoder with head=lm"):
        ZooLM.from_model(encoder, lm.tokenizer)
    assert lm.chat_template(False) is None
    request = Instance("generate_until", {}, ("ab", {"until": ["c"], "num_beams": 2}), 0)
    with pytest.raises(ValueError, match="does not support the generation option 'num_beams'"):
        lm.generate_until([request])
    request = Instance("generate_until", {}, ("ab", {"until": ["c"], "max_gen_toks": 16}), 0)
    with pytest.raises(ValueError, match="max_gen_toks=16 leaves no room for a context in the model's"):
        lm.generate_until([request])


def chat_lm(template: object) -> ZooLM:
    """A ZooLM whose character tokenizer has ``template`` (None: none at all)."""
    tokenizer = build_tokenizer({"name": "char"}, ["<bos>user\nQ: A: b<eos>"])
    tokenizer.chat_template = template
    model = zoo.build("gpt2", vocab_size=tokenizer.vocab_size, d_model=8, n_layers=1, n_heads=2,
                      max_seq_len=64)
    return ZooLM.from_model(model, tokenizer)


def test_apply_chat_template_renders_lm_evals_turns_by_hand():
    """--apply_chat_template: lm-eval's messages under zoo's default template (ChatML with <bos>/<eos>), a
    generation prompt after a user turn, or (gen_prefix) the text ending inside the last assistant message;
    the chat text's <bos> / <eos> are those tokens (plain text keeps them as text)."""
    from zoo.tokenizers.chat import DEFAULT_CHAT_TEMPLATE

    lm = chat_lm(DEFAULT_CHAT_TEMPLATE)
    turns = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q:"}]
    plain = lm.tok_encode("<bos>user")
    assert lm.chat_template(True) == DEFAULT_CHAT_TEMPLATE
    assert lm.apply_chat_template(turns) == "<bos>system\nS<eos>\n<bos>user\nQ:<eos>\n<bos>assistant\n"
    prefixed = [*turns, {"role": "assistant", "content": "A:"}]
    assert lm.apply_chat_template(prefixed, add_generation_prompt=False) == \
        "<bos>system\nS<eos>\n<bos>user\nQ:<eos>\n<bos>assistant\nA:"
    bos, eos = lm.tokenizer.bos_id, lm.tokenizer.eos_id
    assert plain[0] != bos and lm.tok_encode("<bos>user<eos>") == [bos, *lm.tokenizer.encode("user"), eos]


def test_apply_chat_template_drops_the_system_turn_when_the_template_refuses_it():
    """As lm-eval's hf model: a template that raises (Gemma's "System role not supported") is rendered again
    without the system messages; other refusals stay errors."""
    gemma_like = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
                  "{% endif %}{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
                  "{% if add_generation_prompt %}[assistant]{% endif %}")
    lm = chat_lm(gemma_like)
    lm.chat_template(True)
    turns = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
    assert lm.apply_chat_template(turns) == "[user]Q[assistant]"
    prefixed = [*turns, {"role": "assistant", "content": "A: "}]
    assert lm.apply_chat_template(prefixed, add_generation_prompt=False) == "[user]Q[assistant]A: "
    with pytest.raises(ValueError, match="chat template: System role not supported"):
        lm.tokenizer.chat_text(turns)


def test_apply_chat_template_refusals_are_one_error_each():
    with pytest.raises(ModelArgsError, match="--apply_chat_template: this char tokenizer has no chat templ"):
        chat_lm(None).chat_template(True)
    named = chat_lm({"default": "{{ messages[0]['content'] }}", "tool_use": "T{{ messages[0]['content'] }}"})
    with pytest.raises(ModelArgsError, match=r"chat template 'tools': this tokenizer's templates are \["):
        named.chat_template("tools")
    assert named.chat_template("tool_use").startswith("T")
    assert named.apply_chat_template([{"role": "user", "content": "x"}]) == "Tx"


def test_the_entry_point_names_the_registered_model():
    """The installed package's `lm_eval.models` entry point (pyproject.toml; lm-eval's plugin discovery) loads
    the model lm-eval's registry holds as `zoo`."""
    from importlib.metadata import entry_points

    from lm_eval.api.registry import get_model

    (entry,) = [e for e in entry_points(group="lm_eval.models") if e.name == "zoo"]
    assert entry.load() is ZooLM is get_model("zoo")


def test_the_command_line_prints_bad_model_args_as_one_error_line(monkeypatch, capsys, tmp_path):
    import lm_eval.__main__

    from zoo.lm_eval.__main__ import main

    monkeypatch.setattr(lm_eval.__main__, "cli_evaluate", lambda: ZooLM(ckpt=str(tmp_path / "x.ckpt")))
    monkeypatch.setattr("sys.argv", ["zoo.lm_eval", "--model", "zoo"])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 1
    missing = tmp_path / "x.ckpt"
    assert capsys.readouterr().err == f"error: ckpt={missing}: checkpoint not found: {missing}\n"


@pytest.mark.e2e  # lm-eval indexes its task library (~15 s)
def test_a_hub_task_offline_is_one_error_line_saying_how_to_run_it(offline, monkeypatch, capsys):
    """hellaswag's data is on the Hub: offline, lm-eval's datasets call raises ConnectionError (a traceback
    before); zoo's command line prints one line with the ways to run it offline."""
    from zoo.lm_eval.__main__ import main

    monkeypatch.setattr("sys.argv", ["zoo.lm_eval", "--model", "dummy", "--tasks", "hellaswag"])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 1
    err = capsys.readouterr().err  # lm-eval's own INFO lines, then zoo's one error line
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    assert last.startswith("error: Couldn't reach 'Rowan/hellaswag' on the Hub")
    assert "HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1" in last and "docs/evaluation.md" in last


def test_lm_evals_default_cuda_device_falls_back_to_the_cpu_without_cuda(lm, monkeypatch):
    """lm-eval's command line passes device='cuda:0' unless told otherwise; without CUDA, as its hf model
    does, the model runs on the CPU instead of failing with 'Torch not compiled with CUDA enabled'."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert ZooLM.from_model(lm.model, lm.tokenizer, device="cuda:0").device == torch.device("cpu")
