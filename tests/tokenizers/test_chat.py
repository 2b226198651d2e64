"""Chat templates render and encode exactly as transformers' ``apply_chat_template`` (issue 26 item 1).

Each family in tests/tokenizers/chat_templates.py (Llama 3, Llama 3.2 with its date logic, Qwen2.5 ChatML with
tools absent, Gemma without a system role, Mistral [INST] as text and Mistral Nemo's as special tokens,
Phi-3, SmolLM) is written as a Hugging Face folder: a small byte-level BPE ``tokenizer.json`` with the
family's special tokens (and BOS added by its post-processor where the family's does) and a
``tokenizer_config.json`` with the template. zoo's text and ids equal
``AutoTokenizer.from_pretrained(folder).apply_chat_template``'s with and without a generation prompt and a
system message; where the template refuses (Gemma's system role) both raise the template's message.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.version import Version
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
from tokenizers import decoders as tk_decoders

from tests.tokenizers.chat_templates import FAMILIES, LLAMA3, SMOLLM, Family
from zoo.tokenizers import build_tokenizer, load_hf_tokenizer, load_tokenizer, tokenizer_files
from zoo.tokenizers.chat import DEFAULT_CHAT_TEMPLATE, check_messages, read_messages, render_chat

transformers = pytest.importorskip("transformers")
# transformers' continue_final_message rule (a marker after the final message's text) since 4.57; 4.44-4.56
# cut at the text's last occurrence (different for an empty or repeated final message); older have no option
continue_rule = pytest.mark.skipif(Version(transformers.__version__) < Version("4.57"),
                                   reason="transformers' continue_final_message rule is that of 4.57 on")

CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello there! How are you?"}],
    "system_user": [{"role": "system", "content": "  You are a zebra.  "},
                    {"role": "user", "content": "What do you eat?"}],
    "multi_turn": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                   {"role": "assistant", "content": "Hello! <|im_end|> is text here"},
                   {"role": "user", "content": "Tell me a joke about lions 🦁."}],
    "no_system_multi_turn": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey."},
                             {"role": "user", "content": "Bye"}],
}
TEXT = ["Hello there! How are you? You are a zebra. What do you eat? Be brief. Tell me a joke about lions.",
        "system user assistant model Cutting Knowledge Date: December 2023 Today Date: 26 Jul 2024",
        "You are Qwen, created by Alibaba Cloud. You are a helpful assistant named SmolLM [INST]"] * 20


@pytest.fixture(scope="module")
def base_tokenizer() -> str:
    """A byte-level BPE (any text encodes) trained on the words the templates and conversations use."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk_decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(TEXT, trainer)
    return tok.to_str()


def write_folder(base: str, family: Family, folder: Path, *, config_template: object = "family",
                 jinja: str | None = None) -> Path:
    """A Hugging Face folder as one is shipped: tokenizer.json with the specials, tokenizer_config.json."""
    tok = Tokenizer.from_str(base)
    specials = [t for t in family.roles.values() if t is not None] + list(family.added)
    tok.add_special_tokens(list(dict.fromkeys(specials)))
    bos = family.roles.get("bos")
    if family.prepends_bos:
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, tok.token_to_id(bos))])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
              **{f"{role}_token": text for role, text in family.roles.items()}}
    if config_template == "family":
        config["chat_template"] = family.template
    elif config_template is not None:
        config["chat_template"] = config_template
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    if jinja is not None:
        (folder / "chat_template.jinja").write_text(jinja, encoding="utf-8")
    return folder


def transformers_chat(folder: Path, messages: list[dict], add_generation_prompt: bool,
                      **options: bool) -> tuple[str, list[int]]:
    hf = transformers.AutoTokenizer.from_pretrained(str(folder))
    text = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                  **options)
    ids = hf.apply_chat_template(messages, tokenize=True, return_dict=False,
                                 add_generation_prompt=add_generation_prompt, **options)
    return text, list(ids)


def zoo_chat(folder: Path, messages: list[dict], add_generation_prompt: bool,
             **options: bool) -> tuple[str, list[int]]:
    tok = load_hf_tokenizer(folder)
    text = render_chat(tok.chat_template, check_messages(messages), tok.specials.tokens,
                       add_generation_prompt=add_generation_prompt, **options)
    assert tok.chat_text(messages, add_generation_prompt=add_generation_prompt, **options) == text
    return text, tok.chat_ids(messages, add_generation_prompt=add_generation_prompt, **options)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_family_templates_match_transformers(family: Family, base_tokenizer: str, tmp_path: Path) -> None:
    """Text and ids equal apply_chat_template's for every conversation, with and without a generation prompt;
    a refusal (Gemma's system role, Mistral's) is the same message in both."""
    folder = write_folder(base_tokenizer, family, tmp_path / family.name)
    compared = refused = 0
    for name, messages in CONVERSATIONS.items():
        for prompt in (False, True):
            try:
                expected = transformers_chat(folder, messages, prompt)
            except Exception as e:  # the template's raise_exception (jinja2 TemplateError)
                with pytest.raises(ValueError, match=f"chat template: {e}"):
                    zoo_chat(folder, messages, prompt)
                refused += 1
                continue
            assert zoo_chat(folder, messages, prompt) == expected, (family.name, name, prompt)
            compared += 1
    assert compared >= 4, family.name
    if family.name in ("gemma", "mistral"):
        assert refused >= 2  # a system message is refused by the template, in both


# Conversations whose last message is continued: an assistant reply begun (lm-eval's gen_prefix), with a
# trailing space that a template keeps or trims, with spaces around it, and an empty one; the conversations
# above end in a user message, which is continued as well
PREFILLS = {
    "prefill": [{"role": "user", "content": "What do you eat?"},
                {"role": "assistant", "content": "Zebras eat"}],
    "prefill_space": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": "Answer: "}],
    "prefill_padded": [*CONVERSATIONS["no_system_multi_turn"],
                       {"role": "assistant", "content": "  Why did the lion \n "}],
    "prefill_empty": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": ""}],
}


@continue_rule
@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_continue_final_message_matches_transformers(family: Family, base_tokenizer: str,
                                                     tmp_path: Path) -> None:
    """continue_final_message=True: text and ids equal apply_chat_template's (the text ends inside the last
    message, no end-of-turn after it) for every conversation; what transformers refuses (the template's own
    refusals, a final message the template does not write as it is) zoo refuses too."""
    folder = write_folder(base_tokenizer, family, tmp_path / family.name)
    compared = 0
    for name, messages in {**CONVERSATIONS, **PREFILLS}.items():
        try:
            expected = transformers_chat(folder, messages, False, continue_final_message=True)
        except Exception as e:  # a TemplateError (Gemma's system role) or transformers' ValueError
            with pytest.raises(ValueError):
                zoo_chat(folder, messages, False, continue_final_message=True)
            assert not isinstance(e, ValueError) or "final message" in str(e), (family.name, name, e)
            continue
        assert zoo_chat(folder, messages, False, continue_final_message=True) == expected, (family.name, name)
        assert zoo_chat(folder, messages, None, continue_final_message=True) == expected  # the default
        final = messages[-1]["content"].strip()
        assert expected[0].rstrip().endswith(final), (family.name, name)  # ends inside it
        compared += 1
    assert compared >= 5, family.name


@continue_rule
@pytest.mark.parametrize("family", FAMILIES[:3], ids=lambda f: f.name)
def test_continue_final_message_refuses_a_generation_prompt(family: Family, base_tokenizer: str,
                                                           tmp_path: Path) -> None:
    """Both flags at once are refused by transformers and by zoo."""
    folder = write_folder(base_tokenizer, family, tmp_path / family.name)
    messages = PREFILLS["prefill"]
    with pytest.raises(ValueError, match="continue_final_message and add_generation_prompt are not compat"):
        transformers_chat(folder, messages, True, continue_final_message=True)
    with pytest.raises(ValueError, match="continue_final_message and add_generation_prompt cannot both be"):
        zoo_chat(folder, messages, True, continue_final_message=True)


def test_continue_final_message_on_the_zoo_default_template() -> None:
    """zoo's own template, continued: the conversation's text without the last <eos>\n; a template that
    rewrites the final message (so its text is not in the result) or never reads 'content' is refused."""
    messages = check_messages(PREFILLS["prefill_space"])
    tokens = {"bos": "<bos>", "eos": "<eos>"}
    text = render_chat(DEFAULT_CHAT_TEMPLATE, messages, tokens, continue_final_message=True)
    assert text == "<bos>system\nBe brief.<eos>\n<bos>user\nHi<eos>\n<bos>assistant\nAnswer: "
    upper = "{% for m in messages %}{{ m['content'] | upper }}{% endfor %}"
    with pytest.raises(ValueError, match="does not write the final message's text as it is"):
        render_chat(upper, messages, tokens, continue_final_message=True)
    with pytest.raises(ValueError, match="never reads a message's 'content'"):
        render_chat("{{ messages | length }}", messages, tokens, continue_final_message=True)


def test_gemma_refuses_a_system_message_with_its_own_words(base_tokenizer: str, tmp_path: Path) -> None:
    """A template's raise_exception is one error with the template's message (transformers raises it too)."""
    family = next(f for f in FAMILIES if f.name == "gemma")
    tok = load_hf_tokenizer(write_folder(base_tokenizer, family, tmp_path / "gemma"))
    with pytest.raises(ValueError, match="^chat template: System role not supported$"):
        tok.chat_ids(CONVERSATIONS["system_user"])
    assert tok.chat_ids(CONVERSATIONS["user"])[0] == tok.bos_id


def test_bos_is_not_doubled(base_tokenizer: str, tmp_path: Path) -> None:
    """Llama's tokenizer.json adds BOS to a text; its template writes BOS too: the chat has exactly one."""
    family = next(f for f in FAMILIES if f.name == "llama3")
    tok = load_hf_tokenizer(write_folder(base_tokenizer, family, tmp_path / "llama"))
    ids = tok.chat_ids(CONVERSATIONS["user"])
    assert ids[0] == tok.bos_id and ids[1] != tok.bos_id and ids.count(tok.bos_id) == 1
    assert tok.hf.encode("hi").ids[0] == tok.bos_id  # the folder's own template does add it


@pytest.mark.parametrize("form", ["named_list", "jinja_file", "additional_dir"])
def test_template_forms_match_transformers(form: str, base_tokenizer: str, tmp_path: Path) -> None:
    """The list-of-named-templates form (``default`` is used), a chat_template.jinja file (over the config's
    template), and named templates in additional_chat_templates/ read as transformers reads them."""
    family = next(f for f in FAMILIES if f.name == "smollm")
    named = [{"name": "default", "template": SMOLLM}, {"name": "tool_use", "template": LLAMA3}]
    folder = tmp_path / form
    if form == "named_list":
        write_folder(base_tokenizer, family, folder, config_template=named)
    elif form == "jinja_file":
        write_folder(base_tokenizer, family, folder, config_template=LLAMA3, jinja=SMOLLM)
    else:
        write_folder(base_tokenizer, family, folder, config_template=None, jinja=SMOLLM)
        (folder / "additional_chat_templates").mkdir()
        (folder / "additional_chat_templates" / "tool_use.jinja").write_text(LLAMA3, encoding="utf-8")
    for prompt in (False, True):
        assert zoo_chat(folder, CONVERSATIONS["system_user"], prompt) == \
            transformers_chat(folder, CONVERSATIONS["system_user"], prompt)


def test_template_files_key_the_data_cache(base_tokenizer: str, tmp_path: Path) -> None:
    """The files tokenizer=hf reads (hashed into the data cache key) include the .jinja templates."""
    family = next(f for f in FAMILIES if f.name == "smollm")
    folder = write_folder(base_tokenizer, family, tmp_path / "t", config_template=None, jinja=SMOLLM)
    (folder / "additional_chat_templates").mkdir()
    (folder / "additional_chat_templates" / "tool_use.jinja").write_text(LLAMA3, encoding="utf-8")
    names = [p.name for p in tokenizer_files({"name": "hf", "path": str(folder)})]
    assert names == ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "tool_use.jinja"]


def test_jinja_rules_match_transformers(base_tokenizer: str, tmp_path: Path) -> None:
    """Loop controls, namespace, tojson (no HTML escaping), dict, a {% generation %} block, trim/lstrip."""
    template = ("{% set ns = namespace(n=0) %}{% for m in messages %}"
                "{% if m.role == 'system' %}{% continue %}{% endif %}{% set ns.n = ns.n + 1 %}"
                "\n  {% generation %}{{ m | tojson }}{% endgeneration %}"
                "{% if ns.n > 1 %}{% break %}{% endif %}\n{% endfor %}{{ dict(a='<&>') | tojson(indent=2) }}"
                "{{ eos_token }}")
    family = next(f for f in FAMILIES if f.name == "qwen2.5")
    folder = write_folder(base_tokenizer, family, tmp_path / "rules", config_template=template)
    for prompt in (False, True):
        got = zoo_chat(folder, CONVERSATIONS["multi_turn"], prompt)
        assert got == transformers_chat(folder, CONVERSATIONS["multi_turn"], prompt)
        assert '"<&>"' in got[0]


def test_zoo_default_template(tmp_path: Path) -> None:
    """zoo's own tokenizers: ChatML with <bos>/<eos> (ids 1 and 2) in place of <|im_start|>/<|im_end|>;
    the template survives save/load, and an explicit template replaces it."""
    messages = CONVERSATIONS["system_user"]
    text = render_chat(DEFAULT_CHAT_TEMPLATE, messages, {"bos": "<bos>", "eos": "<eos>"})
    assert text == ("<bos>system\n  You are a zebra.  <eos>\n<bos>user\nWhat do you eat?<eos>\n"
                    "<bos>assistant\n")
    tok = build_tokenizer({"name": "char"}, [text])
    assert tok.chat_template == DEFAULT_CHAT_TEMPLATE
    ids = tok.chat_ids(messages)
    assert ids[0] == 1 and ids.count(1) == 3 and ids.count(2) == 2
    assert tok.decode(ids) == text.replace("<bos>", "").replace("<eos>", "")
    assert tok.encode(text).count(1) == 0  # plain encode keeps "<bos>" as text; encode_chat matches it
    tok.save(tmp_path / "zoo")
    assert "chat_template" not in json.loads((tmp_path / "zoo" / "zoo_tokenizer.json").read_text())
    assert load_tokenizer(tmp_path / "zoo").chat_template == DEFAULT_CHAT_TEMPLATE


def test_folder_template_survives_save_and_load(base_tokenizer: str, tmp_path: Path) -> None:
    """A Hugging Face folder's template is kept when zoo saves the tokenizer (checkpoints, exports)."""
    family = next(f for f in FAMILIES if f.name == "qwen2.5")
    tok = load_hf_tokenizer(write_folder(base_tokenizer, family, tmp_path / "qwen"))
    tok.save(tmp_path / "saved")
    again = load_tokenizer(tmp_path / "saved")
    assert again.chat_template == family.template
    assert again.chat_ids(CONVERSATIONS["multi_turn"]) == tok.chat_ids(CONVERSATIONS["multi_turn"])


@pytest.mark.parametrize(("messages", "message"), [
    ({"role": "user", "content": "hi"}, "messages must be a non-empty list"),
    ([], "messages must be a non-empty list"),
    (["hi"], r"messages\[0\] must be an object with role and content"),
    ([{"role": "robot", "content": "hi"}],
     r"messages\[0\].role must be one of system, user, assistant, tool, got 'robot'"),
    ([{"role": "user", "content": 3}], r"messages\[0\].content must be text, got int 3"),
    ([{"role": "user"}], r"messages\[0\].content must be text, got NoneType"),
])
def test_bad_messages_are_named(messages: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_messages(messages)


def test_folder_without_template_is_named(base_tokenizer: str, tmp_path: Path) -> None:
    family = next(f for f in FAMILIES if f.name == "qwen2.5")
    tok = load_hf_tokenizer(write_folder(base_tokenizer, family, tmp_path / "plain", config_template=None))
    assert tok.chat_template is None
    with pytest.raises(ValueError, match="this hf tokenizer has no chat template"):
        tok.chat_ids(CONVERSATIONS["user"])


def test_bad_template_and_messages_file(base_tokenizer: str, tmp_path: Path) -> None:
    family = next(f for f in FAMILIES if f.name == "qwen2.5")
    with pytest.raises(ValueError, match="tokenizer_config.json: chat_template must be a string or a list"):
        load_hf_tokenizer(write_folder(base_tokenizer, family, tmp_path / "num", config_template=3))
    with pytest.raises(ValueError, match="chat template: line 1: "):
        render_chat("{% for m in messages %}", CONVERSATIONS["user"], {})
    with pytest.raises(ValueError, match=r"named templates \['tool_use'\] and no 'default' one"):
        render_chat({"tool_use": LLAMA3}, CONVERSATIONS["user"], {})
    (tmp_path / "bad.json").write_text("[{", encoding="utf-8")
    with pytest.raises(ValueError, match="messages_file='.*bad.json' is not JSON"):
        read_messages(tmp_path / "bad.json", "messages_file")
    (tmp_path / "obj.json").write_text('{"role": "user"}', encoding="utf-8")
    with pytest.raises(ValueError, match="messages_file='.*obj.json' must be a non-empty list"):
        read_messages(tmp_path / "obj.json", "messages_file")


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_hf_export_writes_the_template_transformers_applies(family: Family, base_tokenizer: str,
                                                            tmp_path: Path) -> None:
    """`save_hf` (what zoo.export format=hf writes) keeps a folder's template in tokenizer_config.json with
    `split_special_tokens` off: transformers' apply_chat_template on the exported folder gives zoo's text and
    ids (with split on, it would encode the template's control tokens as text)."""
    tok = load_hf_tokenizer(write_folder(base_tokenizer, family, tmp_path / family.name))
    exported = tok.save_hf(tmp_path / "export")
    config = json.loads((exported / "tokenizer_config.json").read_text())
    assert config["chat_template"] == family.template and config["split_special_tokens"] is False
    compared = 0
    for messages in CONVERSATIONS.values():
        for prompt in (False, True):
            try:
                expected = transformers_chat(exported, messages, prompt)
            except Exception:  # the template refuses (Gemma's system role): checked above
                continue
            text = render_chat(tok.chat_template, check_messages(messages), tok.specials.tokens,
                               add_generation_prompt=prompt)
            assert (text, tok.chat_ids(messages, add_generation_prompt=prompt)) == expected
            assert zoo_chat(exported, messages, prompt) == expected  # and zoo reads its export back alike
            compared += 1
    assert compared >= 4


def test_hf_export_of_named_templates_and_of_zoo_default(base_tokenizer: str, tmp_path: Path) -> None:
    """Named templates are written in transformers' list form (default used by both); zoo's own default
    template is not written, so such an export keeps special-token text as text in every input."""
    family = next(f for f in FAMILIES if f.name == "smollm")
    named = [{"name": "default", "template": SMOLLM}, {"name": "tool_use", "template": LLAMA3}]
    tok = load_hf_tokenizer(write_folder(base_tokenizer, family, tmp_path / "named", config_template=named))
    exported = tok.save_hf(tmp_path / "named_export")
    assert json.loads((exported / "tokenizer_config.json").read_text())["chat_template"] == named
    user = CONVERSATIONS["user"]
    assert zoo_chat(exported, user, True) == transformers_chat(exported, user, True)
    own = build_tokenizer({"name": "char"}, ["<bos>user\nhi<eos>"]).save_hf(tmp_path / "own")
    config = json.loads((own / "tokenizer_config.json").read_text())
    assert "chat_template" not in config and config["split_special_tokens"] is True


@pytest.mark.e2e  # zoo.export's first import of the export and pretrained code: ~6 s on a busy machine
def test_model_export_carries_the_template(base_tokenizer: str, tmp_path: Path) -> None:
    """zoo.export(format="hf") of a checkpoint whose tokenizer came from a folder with a template: the
    exported folder's apply_chat_template gives the checkpoint tokenizer's chat ids."""
    import torch

    import zoo
    from zoo.checkpoint import atomic_torch_save, zoo_section

    family = next(f for f in FAMILIES if f.name == "qwen2.5")
    tok = load_hf_tokenizer(write_folder(base_tokenizer, family, tmp_path / "qwen"))
    torch.manual_seed(0)
    model = zoo.build("llama_small", vocab_size=tok.vocab_size, d_model=16, n_layers=1, n_heads=2,
                      n_kv_heads=1, d_ff=32, max_seq_len=16, **tok.specials.model_ids())
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    atomic_torch_save({"state_dict": state, "zoo": zoo_section(model.config, "lm", tok)}, tmp_path / "m.ckpt")
    exported = zoo.export(tmp_path / "m.ckpt", tmp_path / "hf", format="hf")
    messages = CONVERSATIONS["multi_turn"]
    assert transformers_chat(exported, messages, True)[1] == tok.chat_ids(messages)
