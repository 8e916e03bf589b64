"""The OpenAI-compatible backend against a local server speaking the same protocol (a vLLM server's shape)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from swerl_jax.eval.agentless.backends import OpenAIChat


@pytest.fixture()
def server(monkeypatch):
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, self.headers.get("Authorization"), body))
            if body["messages"][-1]["content"] == "fail":
                self.send_response(500)
                self.end_headers()
                return
            reply = {"choices": [{"message": {"role": "assistant",
                                              "content": f"echo: {body['messages'][-1]['content']}"}}]}
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("TEST_KEY", "sk-test")
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", seen
    httpd.shutdown()


def test_chat_completions_one_request_per_conversation_errors_become_empty_answers(server):
    url, seen = server
    chat = OpenAIChat(url, "served-model", max_tokens=64, api_key_env="TEST_KEY", timeout_s=30)
    answers = chat([[{"role": "user", "content": "hi"}], [{"role": "user", "content": "fail"}]], 0.7)
    assert answers == ["echo: hi", ""]
    path, auth, body = seen[0]
    assert path == "/v1/chat/completions" and auth == "Bearer sk-test"
    assert body == {"model": "served-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64,
                    "temperature": 0.7, "n": 1}
