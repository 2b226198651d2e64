"""Precision defaults by hardware and the W&B online/offline decision (made before wandb.init)."""

from __future__ import annotations

import pytest

from zoo.training import loggers
from zoo.training.precision import resolve_precision


def test_precision_defaults_and_errors():
    assert resolve_precision("auto", "cpu") == "32-true"
    assert resolve_precision("bf16-mixed", "cpu") == "bf16-mixed"
    with pytest.raises(ValueError, match="16-mixed needs a GPU"):
        resolve_precision("16-mixed", "cpu")
    with pytest.raises(ValueError, match="unknown"):
        resolve_precision("fp8", "cpu")


@pytest.fixture
def no_wandb_env(monkeypatch, tmp_path):
    for key in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_DISABLED", "WANDB_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setattr(loggers, "host_reachable",
                        lambda host, timeout=2.0: pytest.fail("no key: must not probe"))
    return tmp_path


def test_offline_without_key(no_wandb_env):
    assert loggers.decide_wandb_mode("auto")[0] == "offline"


def test_wandb_mode_env_wins(no_wandb_env, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert loggers.decide_wandb_mode("auto")[0] == "disabled"
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert loggers.decide_wandb_mode("auto")[0] == "offline"
    assert loggers.decide_wandb_mode("online")[0] == "online"  # an explicit logger.mode beats the env


def test_key_in_netrc_goes_online_only_when_reachable(no_wandb_env, monkeypatch):
    (no_wandb_env / "netrc").write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    monkeypatch.setattr(loggers, "host_reachable", lambda host, timeout=2.0: False)
    mode, reason = loggers.decide_wandb_mode("auto")
    assert mode == "offline" and "not reachable" in reason
    monkeypatch.setattr(loggers, "host_reachable", lambda host, timeout=2.0: True)
    assert loggers.decide_wandb_mode("auto")[0] == "online"


def test_unreachable_probe_returns_quickly():
    assert loggers.host_reachable("10.255.255.1", timeout=0.5) is False
