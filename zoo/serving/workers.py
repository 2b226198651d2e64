"""Worker processes that prepare requests (zoo.serving.prepare: JSON, chat template, tokenizer) off the event
loop, each job within a time budget and each process within a memory budget. A job past its time is stopped by
killing its process (a thread cannot be stopped, and a Jinja sandbox can loop or allocate in ways no hook
sees: nested loops over strings, `'x' * 10**10`, `10**10**8`); the request gets its own 400 and a fresh
process takes the place. Meanwhile every other request is prepared by the other processes and decoded by the
engine as usual."""

from __future__ import annotations

import asyncio
import os
import queue
import resource
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from zoo.serving.endpoint import Endpoint, Limits
from zoo.serving.prepare import Prepared, prepare
from zoo.serving.protocol import APIError

# where `python -m zoo.serving.workers` finds zoo, whatever the server's working directory
_ZOO_ROOT = str(Path(__file__).resolve().parents[2])


class Workers:
    """`processes` worker processes, each holding the tokenizer; `await prepare(raw, endpoint, wait)` from any
    event loop. A job gets `timeout` seconds and its process `memory_mb` of data memory (RLIMIT_DATA); `wait`
    bounds the time spent waiting for a free process (429 past it)."""

    def __init__(self, tokenizer: Any, limits: Limits, *, processes: int = 2, timeout: float = 10.0,
                 memory_mb: int = 2048) -> None:
        if processes < 1 or not timeout > 0 or memory_mb < 64:
            raise ValueError(f"prepare_workers must be >= 1, prepare_timeout > 0 and prepare_memory_mb >= "
                             f"64, got {processes}, {timeout}, {memory_mb}.")
        self.timeout = timeout
        self._setup = (tokenizer, limits, memory_mb * 2**20)
        self._lock = threading.Lock()
        self._procs: list[Any] = []
        self._closed = False
        self._idle: queue.Queue[_Worker] = queue.Queue()
        for _ in range(processes):
            self._idle.put(self._spawn())
        # threads that hand jobs to processes and wait for them (blocked in poll, not holding the GIL)
        self._threads = ThreadPoolExecutor(max_workers=processes + 32,
                                           thread_name_prefix="zoo-serving-prepare")

    async def prepare(self, raw: bytes, endpoint: Endpoint, wait: float) -> Prepared:
        """The request prepared in a worker process, or its APIError."""
        return await asyncio.get_running_loop().run_in_executor(self._threads, self.run, raw, endpoint, wait)

    def run(self, raw: bytes, endpoint: Endpoint, wait: float) -> Prepared:
        """Blocking form of `prepare`."""
        try:
            worker = self._idle.get(timeout=max(wait, 0.0))
        except queue.Empty:
            raise APIError(429, "The server is busy (every request-preparing process is taken); retry later.",
                           type="requests", code="rate_limit_exceeded") from None
        param = endpoint.prompt_param
        try:
            try:
                worker.send((raw, endpoint))
            except OSError:  # the process had died since its last job: a fresh one takes the job
                worker = self._replace(worker)
                worker.send((raw, endpoint))
            if not worker.conn.poll(self.timeout):
                worker = self._replace(worker)
                raise APIError(400, f"Preparing this request (rendering the chat template, tokenizing the "
                                    f"prompt) took longer than the server's budget of {self.timeout:g} s "
                                    f"(prepare_timeout); it was stopped. Send a shorter '{param}'.",
                               param=param, code="prepare_timeout")
            try:
                status, value = worker.conn.recv()
            except (EOFError, OSError):  # it died: past its memory budget (an allocator that aborts), a crash
                worker = self._replace(worker)
                raise APIError(400, f"Preparing this request (rendering the chat template, tokenizing the "
                                    f"prompt) stopped its process, most likely past the server's memory "
                                    f"budget (prepare_memory_mb). Send a shorter '{param}'.",
                               param=param, code="prepare_memory") from None
        finally:
            if self._closed:
                worker.kill()
            else:
                self._idle.put(worker)
        if status == "ok":
            return value
        code, message, kind, param, error_code = value
        raise APIError(code, message, type=kind, param=param, code=error_code)

    def close(self) -> None:
        """Stop every process (idle or busy) and the waiting threads."""
        with self._lock:
            self._closed = True
            procs, self._procs = self._procs, []
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(timeout=5)
        self._threads.shutdown(wait=False, cancel_futures=True)

    def _spawn(self) -> _Worker:
        """A fresh interpreter running `_serve` (a new process, not a fork of this threaded one, and not
        multiprocessing's spawn, which would run the server's own main script again)."""
        jobs_r, jobs_w = os.pipe()
        replies_r, replies_w = os.pipe()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([_ZOO_ROOT, os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.Popen([sys.executable, "-m", "zoo.serving.workers", str(jobs_r), str(replies_w)],
                                pass_fds=(jobs_r, replies_w), stdin=subprocess.DEVNULL, env=env)
        os.close(jobs_r)
        os.close(replies_w)
        worker = _Worker(proc, Connection(jobs_w, readable=False), Connection(replies_r, writable=False))
        worker.jobs.send(self._setup)
        with self._lock:
            self._procs = [p for p in self._procs if p.poll() is None] + [proc]
        return worker

    def _replace(self, worker: _Worker) -> _Worker:
        worker.kill()
        return self._spawn()


class _Worker:
    """One process and the parent's ends of its two pipes (jobs out, replies in)."""

    def __init__(self, proc: subprocess.Popen, jobs: Connection, conn: Connection) -> None:
        self.proc, self.jobs, self.conn = proc, jobs, conn

    def send(self, job: tuple[bytes, Endpoint]) -> None:
        self.jobs.send(job)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=5)
        self.jobs.close()
        self.conn.close()


def _serve(jobs: Connection, replies: Connection) -> None:
    """A worker process: its setup (tokenizer, limits, memory budget) first, then (raw body, endpoint) in,
    ("ok", Prepared) or ("error", APIError's fields) out, until the server closes the pipe."""
    tokenizer, limits, memory = jobs.recv()
    resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
    while True:
        try:
            raw, endpoint = jobs.recv()
        except (EOFError, OSError):  # the server went away
            return
        try:
            reply: tuple[str, Any] = ("ok", prepare(raw, endpoint, tokenizer, limits))
        except APIError as e:
            reply = ("error", (e.status, e.message, e.type, e.param, e.code))
        except MemoryError:
            reply = ("error", (400, "Preparing this request ran out of the server's memory budget "
                                    "(prepare_memory_mb).", "invalid_request_error", None, "prepare_memory"))
        except Exception as e:  # a bug of ours: a 500 naming it (a request's own faults are APIErrors)
            reply = ("error", (500, f"Preparing the request failed: {type(e).__name__}: {e}", "server_error",
                               None, None))
        replies.send(reply)


if __name__ == "__main__":  # python -m zoo.serving.workers JOBS_FD REPLIES_FD (started by Workers._spawn)
    _serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))
