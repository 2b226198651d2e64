"""zoo/utils.py: the shared helpers behave as every caller relies on."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from zoo.utils import IGNORE_INDEX, closest, did_you_mean, eval_mode, module_mode, plain_dict, some


def test_some_names_a_few_and_counts_the_rest():
    assert some(["a", "b"], 5) == "a, b"
    assert some(["a", "b", "c", "d"], 2) == "a, b and 2 more"


def test_ignore_index_is_what_cross_entropy_skips():
    logits = torch.randn(3, 5)
    labels = torch.tensor([1, IGNORE_INDEX, 4])
    expected = torch.nn.functional.cross_entropy(logits[[0, 2]], labels[[0, 2]])
    torch.testing.assert_close(torch.nn.functional.cross_entropy(logits, labels), expected)


def test_did_you_mean_names_the_closest_or_nothing():
    assert did_you_mean("max_new_token", ["max_new_tokens", "num_beams"]) == " Did you mean 'max_new_tokens'?"
    assert did_you_mean("zzz", ["max_new_tokens", "num_beams"]) == ""
    assert did_you_mean(3, ["3a", "b"]) == " Did you mean '3a'?"  # a non-string value is compared as text
    assert closest("rmsnrom", iter(["layernorm", "rmsnorm"])) == "rmsnorm"
    assert closest("x", []) is None


@dataclass
class _Point:
    x: int = 1
    y: str = "a"


def test_plain_dict_accepts_mappings_dataclasses_and_resolved_omegaconf():
    node = OmegaConf.create({"a": 1, "b": "${a}", "nested": {"c": [1, 2]}})
    plain = plain_dict(node, "data")
    assert plain == {"a": 1, "b": 1, "nested": {"c": [1, 2]}} and type(plain["nested"]) is dict
    assert plain_dict(_Point(), "point") == {"x": 1, "y": "a"}
    given = {"k": 1}
    copy = plain_dict(given, "data")
    assert copy == given and copy is not given


@pytest.mark.parametrize("data", [OmegaConf.create({"name": "text", "files": "???"}),
                                  {"name": "text", "files": "???"}])
def test_plain_dict_names_a_missing_value(data):
    with pytest.raises(ValueError, match=r"^data\.files is required \(missing: \['files'\]\)$"):
        plain_dict(data, "data")


def test_plain_dict_rejects_a_non_mapping_naming_what_was_expected():
    with pytest.raises(TypeError, match=r"^model config must be a preset name or mapping, got list\.$"):
        plain_dict([1, 2], "model", expected="a preset name or mapping")
    with pytest.raises(TypeError, match=r"^data config must be a mapping, got int\.$"):
        plain_dict(3, "data")


def _net() -> nn.Module:
    net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5), nn.Sequential(nn.Dropout(0.5)))
    net[2].eval()  # a mixed state: the inner block was frozen by its owner
    return net


def _modes(net: nn.Module) -> list[bool]:
    return [m.training for m in net.modules()]


def test_eval_mode_turns_dropout_off_and_restores_every_submodule():
    net = _net()
    before = _modes(net)
    assert before == [True, True, True, False, False]
    with eval_mode(net) as inside:
        assert inside is net and not any(_modes(net))
        x = torch.ones(1, 2)
        assert torch.equal(net(x), net(x))  # no dropout
    assert _modes(net) == before


def test_eval_mode_restores_on_error_and_module_mode_can_force_training():
    net = _net()
    before = _modes(net)
    with pytest.raises(RuntimeError, match="boom"), eval_mode(net):
        raise RuntimeError("boom")
    assert _modes(net) == before
    net.eval()
    with module_mode(net, training=True):
        assert all(_modes(net))
    assert not any(_modes(net))
