"""Model backends for Agentless Mini: one chat interface over the project's sampler or an OpenAI-compatible server.

A backend is called with a list of conversations (each a list of {"role", "content"} messages) and a temperature
and returns one answer text per conversation. `EngineChat` renders each conversation with the policy's chat
template and samples with the in-process `SamplingEngine` (a workdir's published policy version, a checkpoint
exported to a Hugging Face directory, or `model.hf_dir`); `SamplerChat` asks a running sampler server;
`OpenAIChat` posts to `{base_url}/chat/completions` (vLLM's server, an API), with the standard library only.
A conversation whose prompt exceeds the engine's limit is answered "" and counted in `skipped`, not an error.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Callable, Sequence

import numpy as np

from swerl_jax.chat import render_ids
from swerl_jax.sampler.types import SamplingParams

Chat = Callable[[Sequence[list[dict]], float], list[str]]


class EngineChat:
    """Conversations -> answers with an in-process `SamplingEngine` (or a `SamplerClient` via `client`)."""

    def __init__(self, tokenizer, max_new_tokens: int, max_prompt_len: int, *, engine=None, client=None,
                 top_p: float = 1.0, top_k: int = 0, seed: int = 0) -> None:
        if (engine is None) == (client is None):
            raise ValueError("EngineChat needs exactly one of engine= or client=")
        self.tokenizer, self.engine, self.client = tokenizer, engine, client
        self.max_new_tokens, self.max_prompt_len = max_new_tokens, max_prompt_len
        self.top_p, self.top_k, self.seed, self.calls, self.skipped = top_p, top_k, seed, 0, 0

    def _ids(self, messages: list[dict]) -> np.ndarray:
        # the prompts hold repository code and issues: their text never becomes a role token
        return np.asarray(render_ids(self.tokenizer, messages), np.int32)

    def __call__(self, conversations: Sequence[list[dict]], temperature: float) -> list[str]:
        sampling = SamplingParams(temperature=temperature, top_p=self.top_p, top_k=self.top_k,
                                  max_new_tokens=self.max_new_tokens).validate()
        prompts = [self._ids(c) for c in conversations]
        fits = [i for i, p in enumerate(prompts) if p.size <= self.max_prompt_len]
        self.skipped += len(prompts) - len(fits)
        answers = [""] * len(prompts)
        self.calls += 1
        seed = self.seed * 1_000_003 + self.calls  # a fresh stream per call, reproducible per run
        if self.engine is not None:
            per_call = max(1, self.engine.max_batch)
            for start in range(0, len(fits), per_call):
                chunk = fits[start:start + per_call]
                groups = self.engine.generate([prompts[i] for i in chunk], sampling, 1, seed + start)
                for i, group in zip(chunk, groups):
                    answers[i] = group[0].text or ""
        elif fits:
            groups = self.client.generate([prompts[i].tolist() for i in fits], sampling, num_samples=1, seed=seed)
            for i, group in zip(fits, groups):
                c = group[0]
                answers[i] = c.text if c.text is not None else self.tokenizer.decode(c.tokens,
                                                                                     skip_special_tokens=True)
        return answers


class OpenAIChat:
    """Conversations -> answers from an OpenAI-compatible `/chat/completions` endpoint (one request each)."""

    def __init__(self, base_url: str, model: str, max_tokens: int, api_key_env: str = "OPENAI_API_KEY",
                 timeout_s: float = 600.0) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.max_tokens, self.timeout_s = model, max_tokens, timeout_s
        self.api_key = os.environ.get(api_key_env, "")

    def _one(self, messages: list[dict], temperature: float) -> str:
        body = json.dumps({"model": self.model, "messages": messages, "max_tokens": self.max_tokens,
                           "temperature": temperature, "n": 1}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                reply = json.loads(response.read())
        except OSError as err:  # URLError, HTTPError, timeouts: the sample is lost, the run goes on
            print(f"warning: {self.url}: {err}", flush=True)
            return ""
        choices = reply.get("choices") or [{}]
        return (choices[0].get("message") or {}).get("content") or ""

    def __call__(self, conversations: Sequence[list[dict]], temperature: float) -> list[str]:
        return [self._one(list(c), temperature) for c in conversations]
