"""Serving under load: 1, 4, 16 and 64 concurrent streaming clients on loopback against `python serve.py`
(zoo's continuous batching) and `transformers serve` (without and with its `--continuous-batching`), all three
serving the same model: a `llama_small` decoder (random weights) with a BPE tokenizer trained on the
standard library, written as a zoo checkpoint and exported to a Hugging Face folder by
`python export.py ... format=hf`; both servers load that folder.

Each level runs a bounded number of requests (`REQUESTS`: every client sends its share back to back) and
stops starting new ones after `LEVEL_SECONDS`; it runs `ROUNDS` times per server (the servers take turns) and
the round with the best tokens/s is kept, as this shared machine's load comes in bursts. Per level and
server: completion tokens/s (all clients' tokens over the level's wall time), time to first token and request
latency (p50 / p99). The servers run as subprocesses, one torch thread each; the rounds rotate which server
goes first. Run:
`python -m bench.run --sections serving` (or `python -m bench.bench_serving [--quick]`)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import Section, goal, markdown_table

ROOT = Path(__file__).resolve().parent.parent
LEVELS = {False: (1, 4, 16, 64), True: (1, 4)}
REQUESTS = {False: {1: 8, 4: 16, 16: 32, 64: 64}, True: {1: 2, 4: 4}}  # per level, all clients together
MAX_TOKENS = {False: 64, True: 4}
ROUNDS = {False: 2, True: 1}  # each level runs this many times per server; the best tokens/s is kept
LEVEL_SECONDS = {False: 240.0, True: 60.0}  # no new request starts after this
PRESET = {False: "llama_small", True: "gpt_nano"}
START_SECONDS = 180.0


@dataclass
class Server:
    """One server process under test: the command that starts it and the model id its requests name."""

    name: str
    command: list[str]
    model: str
    port: int
    process: subprocess.Popen | None = None
    log: Path | None = None
    failure: str | None = None  # why it could not be measured

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/completions"


@dataclass
class Level:
    """What one server did at one concurrency level."""

    tokens: int = 0
    seconds: float = 0.0
    ttft: list[float] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)
    errors: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def make_model(folder: Path, quick: bool) -> Path:
    """Train the tokenizer, write the checkpoint, export it with `python export.py ... format=hf`."""
    import torch

    import zoo
    from zoo.checkpoint import atomic_torch_save, zoo_section
    from zoo.tokenizers import build_tokenizer

    stdlib = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:40]
    tok = build_tokenizer({"name": "bpe", "vocab_size": 512 if quick else 2048},
                          [p.read_text(errors="ignore") for p in stdlib])
    torch.manual_seed(0)
    model = zoo.build(PRESET[quick], vocab_size=tok.vocab_size, max_seq_len=256).eval()
    ckpt = folder / "model.ckpt"
    atomic_torch_save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                       "zoo": zoo_section(model.config, "lm", tok)}, ckpt)
    export = [sys.executable, str(ROOT / "export.py"), f"ckpt={ckpt}", f"dir={folder / 'hf'}", "format=hf"]
    subprocess.run(export, check=True, capture_output=True, text=True, cwd=ROOT)
    return folder / "hf"


def prompts(count: int) -> list[str]:
    """Distinct prompts of a few dozen tokens: lines of the standard library's source."""
    text = (Path(sysconfig.get_paths()["stdlib"]) / "textwrap.py").read_text()
    lines = [line.strip() for line in text.splitlines() if len(line.strip()) > 30]
    return [lines[i % len(lines)] for i in range(count)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def servers(hf: Path) -> list[Server]:
    tf = ["transformers", "serve", str(hf), "--device", "cpu", "--host", "127.0.0.1"]
    ports = [free_port() for _ in range(3)]
    return [
        Server("zoo serve.py", [sys.executable, str(ROOT / "serve.py"), f"hf={hf}", f"port={ports[0]}",
                                "model_name=bench", "log_level=warning"], "bench", ports[0]),
        Server("transformers serve", [*tf, "--port", str(ports[1])], str(hf), ports[1]),
        Server("transformers serve --continuous-batching", [*tf, "--port", str(ports[2]),
                                                            "--continuous-batching"], str(hf), ports[2]),
    ]


def start(server: Server, folder: Path) -> None:
    """Start the process and wait until one request has been answered (model loaded, warm)."""
    import httpx

    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    server.log = folder / f"{server.port}.log"
    server.process = subprocess.Popen(server.command, stdout=server.log.open("w"), stderr=subprocess.STDOUT,
                                      cwd=ROOT, env=env)
    deadline = time.monotonic() + START_SECONDS
    body = {"model": server.model, "prompt": "def f(", "max_tokens": 2, "temperature": 0}
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            break
        try:
            if httpx.post(server.url, json=body, timeout=120).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.5)
    tail = server.log.read_text()[-600:] if server.log.is_file() else ""
    server.failure = f"did not answer within {START_SECONDS:.0f} s: {tail.strip()}"
    stop(server)


def stop(server: Server) -> None:
    if server.process is not None and server.process.poll() is None:
        server.process.terminate()
        try:
            server.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.process.kill()


async def one_request(client, server: Server, prompt: str, max_tokens: int, level: Level) -> None:
    """One streaming completion: time to its first text, its end, and its completion tokens (the usage
    chunk when the server sends one, else one per text chunk)."""
    body = {"model": server.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    began = time.perf_counter()
    first, chunks, usage = None, 0, None
    try:
        async with client.stream("POST", server.url, json=body) as r:
            if r.status_code != 200:
                level.errors += 1
                return
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                usage = event.get("usage") or usage
                if any(c.get("text") for c in event.get("choices") or []):
                    chunks += 1
                    first = first if first is not None else time.perf_counter() - began
    except Exception:  # a broken connection counts as an error, the level goes on
        level.errors += 1
        return
    level.latency.append(time.perf_counter() - began)
    level.ttft.append(first if first is not None else level.latency[-1])
    level.tokens += usage["completion_tokens"] if usage else chunks


async def run_level(server: Server, clients: int, requests: int, max_tokens: int, seconds: float) -> Level:
    import httpx

    level = Level()
    texts = prompts(requests)
    stop_at = time.perf_counter() + seconds

    async def client_loop(client, k: int) -> None:
        for i in range(k, requests, clients):
            if time.perf_counter() > stop_at:
                return
            await one_request(client, server, texts[i], max_tokens, level)

    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits) as client:
        began = time.perf_counter()
        await asyncio.gather(*(client_loop(client, k) for k in range(clients)))
        level.seconds = time.perf_counter() - began
    return level


BAD_VALUES = [-1, "7", 2.5, None, True, [], {}, "x" * 20, 10**12, float("nan")]
FIELDS = ["model", "prompt", "max_tokens", "temperature", "top_p", "n", "stream", "stop", "seed", "logprobs",
          "colour", "stream_options"]


def bad_bodies(count: int, model: str, seed: int = 0) -> list[bytes]:
    """`count` request bodies, each a good one with one to three fields set to random wrong values (or an
    unknown model, or broken JSON)."""
    import random

    rng = random.Random(seed)
    bodies = []
    for i in range(count):
        if i % 10 == 9:
            bodies.append(b'{"model": "' + model.encode() + b'", "prompt": [1, 2')
            continue
        body = {"model": model, "prompt": "def f(", "max_tokens": 4}
        for name in rng.sample(FIELDS, rng.randint(1, 3)):
            body[name] = rng.choice(BAD_VALUES)
        bodies.append(json.dumps(body).encode())
    return bodies


def rss_mb(pid: int) -> float:
    """Resident memory of process `pid` (Linux /proc), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def fault_round(server: Server, quick: bool) -> dict[str, int]:
    """Clients killed mid-stream, a burst of bad requests, a flood past the queue bound; then one good
    request. Returns the count of each outcome."""
    import httpx

    counts: dict[str, int] = {}

    def count(key: str) -> None:
        counts[key] = counts.get(key, 0) + 1

    url = server.url
    long = {"model": server.model, "prompt": "def f(", "max_tokens": 200, "stream": True}
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits) as client:

        async def killed() -> None:
            try:
                async with client.stream("POST", url, json=long) as r:
                    async for line in r.aiter_lines():
                        if line.startswith("data: "):
                            break  # the first chunk: the client goes away mid-stream
                count("killed mid-stream")
            except httpx.HTTPError as e:
                count(f"killed mid-stream -> {type(e).__name__}")

        async def send(kind: str, **request) -> None:
            try:
                r = await client.post(url, **request)
                count(f"{kind} -> {r.status_code}")
            except httpx.HTTPError as e:  # counted, not raised: the round goes on
                count(f"{kind} -> {type(e).__name__}")

        async def bad(body: bytes) -> None:
            await send("bad request", content=body, headers={"Content-Type": "application/json"})

        async def flood() -> None:
            await send("flood", json={"model": server.model, "prompt": "def f(", "max_tokens": 100})

        await asyncio.gather(*(killed() for _ in range(8 if quick else 32)))
        for start in range(0, 100 if quick else 1000, 100):
            await asyncio.gather(*(bad(b) for b in bad_bodies(100, server.model, start)))
        await asyncio.gather(*(flood() for _ in range(60 if quick else 600)))
        good = {"model": server.model, "prompt": "def f(", "max_tokens": 4}
        await send("good request afterwards", json=good)
    return counts


def faults(server: Server, quick: bool) -> tuple[str, list[str]]:
    """Three fault rounds against zoo's server (max_batch 64, max_queue 256), its memory after each."""
    rows, outcomes = [], {}
    before = rss_mb(server.process.pid)
    for round_ in range(1, 4):
        outcomes = asyncio.run(fault_round(server, quick))
        time.sleep(2)  # let cancelled rows leave
        rows.append([round_, f"{rss_mb(server.process.pid):.0f}"])
    table = markdown_table(["fault round", "zoo server RSS after (MiB)"], [[0, f"{before:.0f}"], *rows])
    summary = ", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items()))
    return table, [f"Faults (zoo only; each round: {8 if quick else 32} clients that close the connection "
                   f"after their first chunk of a 200-token stream, {100 if quick else 1000} requests with "
                   f"random bad fields (wrong types, out-of-range values, unknown fields and model, broken "
                   f"JSON), a flood of {60 if quick else 600} concurrent requests past the queue bound, then "
                   f"one good request). Outcomes of the last round: {summary}. Round 0 is the RSS after the "
                   "load levels above."]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(quick: bool = False) -> Section:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        hf = make_model(folder, quick)
        sides = servers(hf)
        for server in sides:
            start(server, folder)
        results: dict[tuple[str, int], Level] = {}
        try:
            turn = 0
            for _ in range(ROUNDS[quick]):  # all levels, then all levels again: a burst hits no level alone
                for clients in LEVELS[quick]:
                    live = [s for s in sides if s.failure is None]
                    turn += 1
                    for server in live[turn % len(live):] + live[: turn % len(live)]:  # rotate who goes first
                        level = asyncio.run(run_level(server, clients, REQUESTS[quick][clients],
                                                      MAX_TOKENS[quick], LEVEL_SECONDS[quick]))
                        best = results.get((server.name, clients))
                        if best is None or level.tokens_per_s > best.tokens_per_s:
                            results[server.name, clients] = level
            fault_table, fault_notes = faults(sides[0], quick) if sides[0].failure is None else ("", [])
        finally:
            for server in sides:
                stop(server)
    found = section(sides, results, quick)
    if fault_table:
        found.table += "\n\n" + fault_table
        found.notes += fault_notes
    return found


def section(sides: list[Server], results: dict[tuple[str, int], Level], quick: bool) -> Section:
    rows, goals = [], []
    zoo = sides[0].name
    for clients in LEVELS[quick]:
        for server in sides:
            level = results.get((server.name, clients))
            if level is None:
                continue
            zoo_tps = results[zoo, clients].tokens_per_s
            ratio = ("1.00x (ref)" if server.name == zoo
                     else f"{zoo_tps / level.tokens_per_s:.2f}x" if level.tokens_per_s > 0 else "-")
            rows.append([clients, server.name, len(level.latency), level.errors, f"{level.tokens_per_s:.0f}",
                         *(f"{1000 * percentile(values, q):.0f}" if values else "-"
                           for values, q in ((level.ttft, 0.5), (level.ttft, 0.99), (level.latency, 0.5),
                                             (level.latency, 0.99))),
                         ratio])
        for server in sides[1:]:
            other = results.get((server.name, clients))
            if other is not None and other.tokens_per_s > 0:
                goals.append((f"serving {clients} clients: zoo / {server.name} tokens/s",
                              results[zoo, clients].tokens_per_s / other.tokens_per_s, 1.0))
    base = results.get((zoo, 1))
    summary = []
    if base is not None and base.tokens_per_s > 0:
        for clients in LEVELS[quick][1:]:
            scale = results[zoo, clients].tokens_per_s / base.tokens_per_s
            summary.append(f"zoo tokens/s at {clients} clients / at 1 client: {scale:.1f}x"
                           + (f" ({goal(scale, 4.0)} the goal of >= 4x)" if clients == 16 else ""))
            if clients == 16:
                goals.append(("serving: zoo tokens/s, 16 clients / 1 client", scale, 4.0))
    table = markdown_table(["clients", "server", "requests", "errors", "tokens/s", "TTFT p50 ms",
                            "TTFT p99 ms", "latency p50 ms", "latency p99 ms", "zoo / this (tokens/s)"], rows)
    failed = [f"{s.name} could not be measured: {s.failure}" for s in sides if s.failure]
    notes = [
        f"Model: `{PRESET[quick]}` with a {'512' if quick else '2048'}-token BPE vocabulary (random "
        "weights), max_seq_len 256, exported by `python export.py ... format=hf`; every server loads that "
        "one folder. "
        f"Each request: a distinct one-line prompt (~10-25 tokens), max_tokens={MAX_TOKENS[quick]}, "
        "temperature 0, stream=true. Requests per level: "
        + ", ".join(f"{c} clients {REQUESTS[quick][c]}" for c in LEVELS[quick])
        + f" (no new request after {LEVEL_SECONDS[quick]:.0f} s); best of {ROUNDS[quick]} rounds per level "
        "and server (by tokens/s). One torch thread per server process "
        "(OMP_NUM_THREADS=1), fp32, loopback HTTP, the client in its own process (asyncio + httpx).",
        "tokens/s: completion tokens of all requests / the level's wall time (the usage chunk's count). "
        "TTFT: from sending the request to its first chunk with text. zoo / this: zoo's tokens/s over that "
        "server's.",
        *summary, *failed,
    ]
    return Section("Serving: concurrent streaming clients (zoo serve.py vs transformers serve)", table, notes,
                   {k[0] + f" @{k[1]}": vars(v) for k, v in results.items()}, goals)


if __name__ == "__main__":
    print(run("--quick" in sys.argv).markdown())
