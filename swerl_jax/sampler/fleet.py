"""Several sampler processes behind one `generate`: a request's prompts are split across them and sent at once.

    clients = [SamplerClient(config_json=path, weights_dir=w, server_args=[f"--cpus={c}"]) for c in ("0-3", "4-7")]
    fleet = SamplerFleet(clients)
    groups = fleet.generate(prompts, sampling, num_samples=16, seed=s, min_policy_version=v)  # as one client's

The contract:
  * Same results as one process, whatever the fleet's size. Each part goes out with its first prompt's index as
    `prompt_offset` and the request's seed, so every sample keeps its random key (`core.row_key`) and its
    `prompt_index`. The parts are also cut at the server engine's own batch boundaries (`max_batch // num_samples`
    prompts, `SamplingEngine.generate`'s chunks; `max_batch` from the first ping), so each server runs exactly
    the batches one server would: tokens *and* log-probs are bit-identical (on the same hardware and config).
    Cut elsewhere, the tokens would still match but the log-probs could differ in the last bits (other padding).
  * Balance: the batches (not prompts, not tokens: a batch costs one decode loop, whatever it holds) are dealt
    out in contiguous runs as equal in number as possible, the first clients taking one more; a request of
    fewer batches than clients leaves the last clients idle.
  * A client that fails with `SamplerError` (its server dead or hung, after the client's own `max_restarts`) is
    closed and dropped with a warning naming it and its log; its part is cut again (at batch boundaries) over
    the clients left and re-sent, with the same offsets, so the result is unchanged and nothing is lost. A
    `SamplerRequestError` (a bad request: every server would refuse it) is raised once the parts in flight are
    back, never retried. With no client left, `SamplerError`. A failure while the fleet is being stopped (`kill`,
    `close`, or Ctrl-C reaching a server: `SamplerClient.stopping`) is the run stopping: raised, nothing re-sent.
  * One request per client at a time; the fleet itself serves one caller at a time (the trainer serialises).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import numpy as np

from swerl_jax.sampler.client import SamplerClient, SamplerError
from swerl_jax.sampler.types import Completion, SamplingParams

log = logging.getLogger("swerl_jax.sampler")


def split(n: int, parts: int, unit: int = 1) -> list[tuple[int, int]]:
    """[start, stop) ranges covering range(n) in order: at most `parts` of them, each whole `unit`s of items (the
    last may end short at n), as equal in units as possible, the first ones one unit longer. n = 0 gives [(0, 0)]."""
    units = max(1, -(-n // unit))
    parts = max(1, min(parts, units))
    q, r = divmod(units, parts)
    out, u = [], 0
    for k in range(parts):
        width = q + (k < r)
        out.append((min(u * unit, n), min((u + width) * unit, n)))
        u += width
    return out


class SamplerFleet:
    """N `SamplerClient`s (each its own server process) with `SamplerClient.generate`'s interface."""

    def __init__(self, clients: Sequence[SamplerClient]) -> None:
        """Use `clients` (started or connected, all on the same config and weights directory); the fleet owns
        them: `close` closes every one."""
        if not clients:
            raise ValueError("SamplerFleet needs at least one SamplerClient")
        self._all = list(clients)
        self._live = list(clients)
        self._max_batch: int | None = None
        self._stopping = False  # kill() or close(): a failing part is the run stopping, not a server to replace

    @property
    def clients(self) -> tuple[SamplerClient, ...]:
        """The live clients, in order."""
        return tuple(self._live)

    def __len__(self) -> int:
        """How many clients are live."""
        return len(self._live)

    def _name(self, client: SamplerClient) -> str:
        where = client.log_path if client.proc is not None else "a server this process did not start"
        return f"sampler {self._all.index(client)} at {client.address} (log {where})"

    def _drop(self, client: SamplerClient, error: Exception) -> None:
        if client in self._live:
            self._live.remove(client)
        log.warning("sampler fleet: dropping %s, %d left: %s", self._name(client), len(self._live),
                    str(error).splitlines()[0] if str(error) else type(error).__name__)

    def _first_live(self) -> SamplerClient:
        if not self._live:
            raise SamplerError(f"no sampler left in the fleet: all {len(self._all)} failed (see the warnings above)")
        return self._live[0]

    def ping(self) -> dict:
        """The first live client's `ping` (a failing one is dropped and the next asked)."""
        while True:
            client = self._first_live()
            try:
                return client.ping()
            except SamplerError as e:
                _close_quietly(client)
                self._drop(client, e)

    def _batch_prompts(self, num_samples: int) -> int:
        """Prompts per engine batch in the servers (`SamplingEngine.generate`'s chunks)."""
        if self._max_batch is None:
            self._max_batch = int(self.ping()["max_batch"])
        return max(1, self._max_batch // num_samples)

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams = SamplingParams(),
                 num_samples: int = 1, seed: int = 0, min_policy_version: int = 0,
                 wait_timeout_s: float = 60.0, *, prompt_offset: int = 0) -> list[list[Completion]]:
        """As `SamplerClient.generate` of all `prompts` on one server (see the module docstring)."""
        prompts = [np.asarray(p, np.int32).reshape(-1) for p in prompts]
        unit = self._batch_prompts(num_samples)
        self._first_live()  # raises when none is left
        pending = deque(split(len(prompts), len(self._live), unit))  # [start, stop) parts not yet answered
        done: dict[int, list[list[Completion]]] = {}
        running: dict[Future, tuple[SamplerClient, int, int]] = {}
        idle = list(self._live)  # every live client is idle or running
        error: BaseException | None = None

        stopped: set[int] = set()  # clients that failed because the run is stopping (asked before closing them)

        def send(client: SamplerClient, start: int, stop: int) -> list[list[Completion]]:
            try:
                return client.generate(prompts[start:stop], sampling, num_samples, seed, min_policy_version,
                                       wait_timeout_s, prompt_offset=prompt_offset + start)
            except SamplerError:
                if client.stopping:
                    stopped.add(id(client))
                _close_quietly(client)  # a hung server must not keep its cores
                raise

        with ThreadPoolExecutor(max_workers=len(idle), thread_name_prefix="sampler-fleet") as pool:
            while True:
                while pending and idle and error is None:
                    client, (start, stop) = idle.pop(0), pending.popleft()
                    running[pool.submit(send, client, start, stop)] = (client, start, stop)
                if not running:  # all answered, or an error and nothing left in flight
                    break
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    client, start, stop = running.pop(future)
                    try:
                        done[start] = future.result()
                        idle.append(client)
                    except SamplerError as e:
                        if self._stopping or id(client) in stopped:
                            error = error or e  # our own shutdown (or Ctrl-C): nothing to drop or re-send
                            continue
                        self._drop(client, e)
                        if not self._live:
                            error = error or SamplerError(f"no sampler left in the fleet: all {len(self._all)} "
                                                          f"failed; the last: {e}")
                            continue
                        parts = split(stop - start, len(self._live), unit)  # start is at a batch boundary
                        pending.extendleft((start + a, start + b) for a, b in reversed(parts))
                        log.warning("sampler fleet: re-sending prompts %d..%d to %d sampler(s)", start, stop - 1,
                                    len(parts))
                    except Exception as e:  # noqa: BLE001 - a bad request (SamplerRequestError) or a bug: raised
                        error = error or e
                        idle.append(client)
        if error is not None:
            raise error
        return [g for start in sorted(done) for g in done[start]]

    def close(self) -> None:
        """Close every client (live or dropped): stops the servers they started."""
        self._stopping = True
        for client in self._all:
            _close_quietly(client)

    def kill(self) -> None:
        """Stop every member's server at once (`SamplerClient.kill`): a request in flight fails, none is re-sent
        to a live member because none is left."""
        self._stopping = True
        for client in self._all:
            try:
                client.kill()
            except Exception as e:  # noqa: BLE001 - best effort, as closing
                log.warning("stopping sampler at %s failed: %s", client.address, e)

    def __enter__(self) -> SamplerFleet:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _close_quietly(client: SamplerClient) -> None:
    try:
        client.close()
    except Exception as e:  # noqa: BLE001 - closing is best effort (the server may already be gone)
        log.warning("closing sampler at %s failed: %s", client.address, e)

