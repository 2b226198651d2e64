"""Experiment loggers by name (`logger=wandb|csv|none`). W&B decides online vs offline BEFORE `wandb.init`
so a run never waits on a network that is not there: WANDB_MODE wins; otherwise online only with an API
key (env WANDB_API_KEY or a ~/.netrc entry for the W&B host) and a reachable host."""

from __future__ import annotations

import inspect
import netrc
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from zoo.options import TEXT, Options, check_entry
from zoo.registry import Registry

# name -> factory(run_dir, run_name, **options); the factory's keyword parameters are its logger.* keys.
LOGGERS: Registry = Registry("logger")
WandbMode = Literal["auto", "online", "offline", "disabled"]


def wandb_host() -> str:
    return urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"


def has_wandb_key() -> bool:
    """An API key in WANDB_API_KEY or in ~/.netrc (or $NETRC) for the W&B host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    path = os.environ.get("NETRC", str(Path.home() / ".netrc"))
    try:
        return netrc.netrc(path).authenticators(wandb_host()) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def host_reachable(host: str, timeout: float = 3.0) -> bool:
    """An HTTPS answer (any status) from `host` within `timeout`; a bare TCP connect is not enough
    (sandboxes and proxies accept connections they cannot complete)."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(f"https://{host}/healthz", timeout=timeout).close()
        return True
    except urllib.error.HTTPError:  # the host answered
        return True
    except (OSError, ValueError):  # DNS, refused, TLS failure, timeout
        return False


def decide_wandb_mode(requested: str = "auto") -> tuple[str, str]:
    """Return (mode, reason). `requested` is logger.mode (a WandbMode, which its Options check); WANDB_MODE
    in the environment overrides `auto`."""
    if requested != "auto":
        return requested, f"logger.mode={requested}"
    env = os.environ.get("WANDB_MODE")
    if env:
        if env in ("dryrun", "offline"):
            return "offline", f"WANDB_MODE={env}"
        if env not in ("online", "disabled", "run"):
            raise ValueError(f"WANDB_MODE={env!r} is unknown; allowed: online, offline, disabled")
        return ("online" if env == "run" else env), f"WANDB_MODE={env}"
    if os.environ.get("WANDB_DISABLED", "").lower() in ("1", "true"):
        return "disabled", "WANDB_DISABLED is set"
    if not has_wandb_key():
        return "offline", "no W&B API key (WANDB_API_KEY or ~/.netrc)"
    if not host_reachable(wandb_host()):
        return "offline", f"{wandb_host()} is not reachable"
    return "online", "API key found and host reachable"


@LOGGERS.register("wandb")
def _wandb(run_dir: Path, run_name: str, *, mode: WandbMode = "auto", project: str = "zoo",
           entity: str | None = None, group: str | None = None, tags: list[str] | None = None,
           resume_id: str | None = None):
    """`resume_id`: the W&B run id a resumed checkpoint recorded; the run continues it (offline too: `wandb
    sync` then appends to the same run)."""
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    mode, reason = decide_wandb_mode(mode)
    if mode == "disabled":
        print(f"[zoo] W&B disabled ({reason}).")
        return None
    os.environ["WANDB_MODE"] = mode  # also seen by DDP child processes and wandb's service
    if mode == "offline":
        print(f"[zoo] W&B offline ({reason}). Upload later with: wandb sync "
              f"{run_dir / 'wandb'}/offline-run-*")
    resume = {"id": resume_id, "resume": "allow"} if resume_id else {}
    if resume_id:
        print(f"[zoo] W&B continues run {resume_id} (its id is kept in the checkpoint)")
    logger = WandbLogger(
        project=project, entity=entity, name=run_name, save_dir=str(run_dir),
        tags=list(tags or []), group=group, offline=(mode == "offline"), log_model=False,
        settings=wandb.Settings(init_timeout=60, x_disable_stats=True, silent=True), **resume,
    )
    # Lightning always passes `anonymous` (None) to wandb.init, and wandb warns that the setting "has no
    # effect" whatever its value: leave the key out (its default is the same)
    getattr(logger, "_wandb_init", {}).pop("anonymous", None)
    return logger


@LOGGERS.register("csv")
def _csv(run_dir: Path, run_name: str):
    from lightning.pytorch.loggers import CSVLogger

    return CSVLogger(save_dir=str(run_dir), name="csv", version="")


@LOGGERS.register("none")
def _none(run_dir: Path, run_name: str):
    return None


def logger_options(name: str) -> Options:
    """logger.* keys of logger `name`: its factory's keyword parameters, plus `name`."""
    return Options.of(LOGGERS.get(name), skip=("run_dir", "run_name", "resume_id")).extended({"name": TEXT})


def build_logger(cfg: Mapping[str, Any], run_dir: Path, run_name: str, *, resume_id: str | None = None):
    """`logger: {name: wandb|csv|none, ...}` -> a Lightning logger or None. `resume_id` (a resumed run's
    saved `run_id`) goes to the loggers that continue runs by id."""
    opts = dict(cfg)
    name = opts.pop("name")
    check_entry("logger", name, cfg, logger_options, LOGGERS)
    factory = LOGGERS.get(name)
    if resume_id and "resume_id" in inspect.signature(factory).parameters:
        opts["resume_id"] = resume_id
    return factory(run_dir, run_name, **opts)


def run_id(loggers) -> str | None:
    """The W&B run id among a Lightning module's `loggers` (saved in checkpoints as `zoo.wandb_run_id`)."""
    from lightning.pytorch.loggers import WandbLogger

    found = [lg.version for lg in loggers or [] if isinstance(lg, WandbLogger)]
    return str(found[0]) if found and found[0] else None


def finish_logger(logger, *, failed: bool) -> None:
    """Close the W&B run even when training raised (exit code 1 marks it failed). Without wandb imported
    there is no run: a csv or none run does not import it to find out (0.3 s of CPU)."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.finish(exit_code=1 if failed else 0)
