"""What the command line gave: `model.moe.router=...` sets one key inside the `model.moe` mapping, given as
`moe.router` (not the model key `moe.router`, and not the whole mapping: the rest stays the preset's)."""

from zoo.finetune.given import given_in_group


def test_a_key_inside_a_mapping_counts_as_its_model_key():
    resolved = {"moe": {"n_experts": 8, "router": "sigmoid_bias"}, "n_heads": 8, "dropout": 0.0}
    given = given_in_group("model", ["model.moe.router=sigmoid_bias", "+model.n_heads=8", "trainer.x=1"],
                           resolved)
    assert given == {"moe.router": "sigmoid_bias", "n_heads": 8}
    whole = given_in_group("model", ["+model.moe={n_experts: 8}", "~model.moe.aux_coef"], resolved)
    assert whole == {"moe": resolved["moe"]}
