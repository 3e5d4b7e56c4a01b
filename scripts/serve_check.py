#!/usr/bin/env python3
"""Checks a running `diskformer serve` end to end over HTTP (Python's standard library only):
a greedy chat answer and its stream agree, a returning conversation reuses its cache, parallel
requests each get the answer they get alone, log-probabilities, JSON mode, a forced tool call
and n choices have their shapes, a sampled request's drafts change nothing, and a bad request
is answered and survived.
Prints the decode rate the server reports. Exit status 1 on any failure.

    scripts/serve_check.py http://127.0.0.1:8080 [max_tokens]
"""
import json
import re
import sys
import threading
import time
import urllib.error
import urllib.request

base = sys.argv[1].rstrip("/")
max_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 128
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def request(path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def chat(question, stream=False, tokens=max_tokens):
    body = {"messages": [{"role": "user", "content": question}], "max_tokens": tokens, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return request("/v1/chat/completions", body)


for _ in range(600):  # the model loads first
    try:
        if request("/health")[0] == 200:
            break
    except (urllib.error.URLError, ConnectionError):
        pass
    time.sleep(0.5)
else:
    sys.exit("the server did not come up")

status, text = chat("Tell me about the sea.")
check(status == 200, f"chat answered ({status})")
whole = json.loads(text)
msg = whole["choices"][0]["message"]
t = whole["timings"]
print(f"     {whole['usage']['completion_tokens']} tokens, prefill {t['prompt_per_second']:.0f} tok/s, "
      f"decode {t['predicted_per_second']:.1f} tok/s, ttft {t['ttft_ms']:.1f} ms")

status, text = chat("Tell me about the sea.", stream=True)
events = [line[6:] for line in text.split("\n\n") if line.startswith("data: ")]
check(events and events[-1] == "[DONE]", "the stream ends with [DONE]")
chunks = [json.loads(e) for e in events[:-1]]
content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
reasoning = "".join(c["choices"][0]["delta"].get("reasoning_content", "") for c in chunks if c["choices"])
check(content == msg["content"] and reasoning == msg.get("reasoning_content", ""), "the stream adds up to the whole answer")
usage = chunks[-1].get("usage", {})
check(usage.get("prompt_tokens_details", {}).get("cached_tokens", 0) > 0, f"the same prompt again reused the cache ({usage})")

questions = ["Name a river.", "What is two plus two?", "Say hello.", "Why is grass green?"]
alone = [json.loads(chat(q, tokens=32)[1])["choices"][0]["message"] for q in questions]
together = [None] * len(questions)


def ask(i):
    together[i] = json.loads(chat(questions[i], tokens=32)[1])["choices"][0]["message"]


threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(questions))]
for th in threads:
    th.start()
for th in threads:
    th.join()
check(together == alone, "parallel requests get the answers they get alone")

# Log-probabilities: one entry per answer token, none above 0, greedy takes the likeliest.
body = {"messages": [{"role": "user", "content": "Count to ten."}], "max_tokens": 16, "logprobs": True,
        "top_logprobs": 3, "chat_template_kwargs": {"enable_thinking": False}}
status, text = request("/v1/chat/completions", body)
r = json.loads(text)
entries = r["choices"][0]["logprobs"]["content"] if status == 200 else []
ended = r["choices"][0]["finish_reason"] == "stop" if status == 200 else False
check(status == 200 and len(entries) == r["usage"]["completion_tokens"] - (1 if ended else 0),
      f"logprobs: one entry per answer token ({len(entries)})")
check(all(e["logprob"] <= 0 and e["top_logprobs"][0]["token"] == e["token"] for e in entries),
      "logprobs: greedy tokens are the likeliest")

# JSON mode, a forced function call, n choices.
body = {"messages": [{"role": "user", "content": "Describe a cat as JSON."}], "max_tokens": 256,
        "response_format": {"type": "json_object"}, "chat_template_kwargs": {"enable_thinking": False}}
status, text = request("/v1/chat/completions", body)
r = json.loads(text)
if status == 200 and r["choices"][0]["finish_reason"] == "stop":
    try:
        json.loads(r["choices"][0]["message"]["content"])
        check(True, "json_object: the answer parses")
    except ValueError:
        check(False, "json_object: the answer parses")
else:
    check(status == 200, f"json_object answered ({status}, {r['choices'][0]['finish_reason'] if status == 200 else text})")
tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
          "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"], "additionalProperties": False}}}]
body = {"messages": [{"role": "user", "content": "Weather in Rome?"}], "max_tokens": 128, "tools": tools,
        "tool_choice": "required", "chat_template_kwargs": {"enable_thinking": False}}
status, text = request("/v1/chat/completions", body)
r = json.loads(text)
calls = r["choices"][0]["message"].get("tool_calls") if status == 200 else None
check(bool(calls) and calls[0]["function"]["name"] == "get_weather" and
      json.loads(calls[0]["function"]["arguments"])["city"] in ("Paris", "Rome"), f"a forced tool call ({text[:200]})")
body = {"messages": [{"role": "user", "content": "A word?"}], "max_tokens": 8, "n": 2, "temperature": 1.0, "seed": 5}
status, text = request("/v1/chat/completions", body)
check(status == 200 and len(json.loads(text)["choices"]) == 2, "n = 2 gives two choices")
whole = [c["message"].get("content", "") for c in json.loads(text)["choices"]] if status == 200 else []
body["stream"] = True
status, text = request("/v1/chat/completions", body)
events = [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: {")]
streamed = ["", ""]
for e in events:
    for c in e.get("choices", []):
        streamed[c["index"]] += c["delta"].get("content", "") or ""
check(status == 200 and streamed == whole, "n = 2 streamed (at once, interleaved) adds up to the same two choices")
# Top-k off (vLLM's -1) with top-p: two choices sampled at once from the device's head and row mass
# (a pass's loops each ask for theirs), streamed or not: the same two answers.
body = {"messages": [{"role": "user", "content": "A story?"}], "max_tokens": 48, "n": 2, "temperature": 0.9,
        "top_k": -1, "top_p": 0.9, "min_p": 0, "seed": 12}
status, text = request("/v1/chat/completions", body)
whole = [c["message"].get("content", "") for c in json.loads(text)["choices"]] if status == 200 else []
body["stream"] = True
status2, text = request("/v1/chat/completions", body)
streamed = ["", ""]
for e in [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: {")]:
    for c in e.get("choices", []):
        streamed[c["index"]] += c["delta"].get("content", "") or ""
check(status == 200 and status2 == 200 and len(whole) == 2 and streamed == whole,
      "top_k -1, top_p 0.9, n = 2: the same two choices streamed or not")
body = {"messages": [{"role": "user", "content": "An id?"}], "max_tokens": 64, "temperature": 1.0, "seed": 3,
        "chat_template_kwargs": {"enable_thinking": False},
        "response_format": {"type": "json_schema", "json_schema": {"name": "id", "schema": {"type": "object",
            "properties": {"id": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"}}, "required": ["id"],
            "additionalProperties": False}}}}
status, text = request("/v1/chat/completions", body)
answer = json.loads(text)["choices"][0] if status == 200 else {}
ok = status == 200
if ok and answer.get("finish_reason") == "stop":
    ok = re.fullmatch(r"[A-Z]{2}-\d{3}", json.loads(answer["message"]["content"])["id"]) is not None
check(ok, f"a schema pattern is followed ({text[:200]})")

# Speculative decoding by prompt lookup on a sampled request: the same seed, the same answer.
body = {"messages": [{"role": "user", "content": "Repeat after me: one two three, one two three, one two three."}],
        "max_tokens": max_tokens, "temperature": 0.7, "top_k": 3, "seed": 9}
answers = []
for d in (0, 7):
    status, text = request("/v1/chat/completions", dict(body, draft=d))
    answers.append((status, json.loads(text) if status == 200 else text))
same = all(st == 200 for st, _ in answers) and answers[0][1]["choices"][0]["message"] == answers[1][1]["choices"][0]["message"]
timings = answers[1][1].get("timings", {}) if answers[1][0] == 200 else {}
check(same, f"a sampled request with drafts gives the answer it gives without (drafts {timings.get('draft_n_accepted')} "
            f"of {timings.get('draft_n')} kept)")

status, text = request("/v1/chat/completions", {"messages": []})
check(status == 400 and "error" in json.loads(text), f"a bad request gets a 400 error body ({status})")
check(chat("Still there?", tokens=4)[0] == 200, "and the server goes on")

sys.exit(1 if failures else 0)
