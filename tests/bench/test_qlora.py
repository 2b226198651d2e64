"""bench/bench_qlora.py: at --quick size both sides train, the tensor accounting adds up, and QLoRA holds
fewer bytes than LoRA on the same layers (the NF4 base); the lean load of init_from allocates less than the
eager one and builds the same model; e2e: it spawns the measuring processes (at --quick one for the
fine-tuning sides and one for the loads, each side measured once)."""

from __future__ import annotations

from importlib.util import find_spec

import pytest

# found, not imported: collecting this file (every xdist worker does) does not pay bitsandbytes' import
NEEDS_BITSANDBYTES = pytest.mark.skipif(find_spec("bitsandbytes") is None,
                                        reason="the qlora extra (pip install 'zoo[qlora]')")
pytestmark = [pytest.mark.e2e, NEEDS_BITSANDBYTES]


def test_quick_run_measures_both_sides():
    from bench.bench_qlora import SIDES, run

    section = run(quick=True)
    data = section.data
    assert set(data["tensor_peak"]) == set(SIDES)
    for side in SIDES:
        assert data["tensor_peak"][side] == data["held"][side] + data["step_peak"][side]
        assert data["process"][side]["steps_peak"] > 0 and data["step_s"][side] > 0
    assert data["held"]["qlora"] < data["held"]["lora"]
    assert data["held"]["qlora_checkpointed"] == data["held"]["qlora"]  # checkpointing holds nothing more
    assert "| finetune=qlora |" in section.markdown()
    for source, sides in data["load"]["results"].items():  # the lean load allocates less than the eager one
        assert sides["lean"]["allocated_peak"] < sides["eager"]["allocated_peak"], source
        assert sides["lean"]["held"] == sides["eager"]["held"], source  # the same model either way
        assert f"| {source} | lean |" in section.markdown()
