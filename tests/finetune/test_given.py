"""What the command line gave: `model.ffn.router=...` sets one key inside the `model.ffn` part, given as
`ffn.router` (not the whole part: the rest stays the pretrained model's)."""

from zoo.finetune.given import given_in_group


def test_a_key_inside_a_part_counts_as_its_model_key():
    resolved = {"ffn": {"name": "moe", "n_experts": 8, "router": {"name": "sigmoid_bias"}}, "n_heads": 8,
                "dropout": 0.0}
    given = given_in_group("model", ["model.ffn.router=sigmoid_bias", "+model.n_heads=8", "trainer.x=1"],
                           resolved)
    assert given == {"ffn.router": {"name": "sigmoid_bias"}, "n_heads": 8}
    whole = given_in_group("model", ["model.ffn={name: moe, n_experts: 8}", "~model.ffn.capacity_factor"],
                           resolved)
    assert whole == {"ffn": resolved["ffn"]}
