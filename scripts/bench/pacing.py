"""What the rate benchmarks of the model stages share (scripts/bench/questions.py, items.py): the
Python peer (a thread pool of the stage's width pacing the very request bodies vidcurate sent at
the same limit), the rate of an arrival log, and the two-line table comparing the two tools."""
import concurrent.futures
import time
import urllib.request


def rate(log):
    """Requests per minute between the first and the last arrival."""
    return (len(log) - 1) / (log[-1] - log[0]) * 60 if len(log) >= 2 else 0.0


def span(log):
    return log[-1] - log[0] if len(log) >= 2 else 0.0


def paced_peer(url, key, bodies, width, limit):
    """What a Python data engineer writes: `width` threads, submission i at i * 60 / limit s, no
    retry (a 429 is an unanswered request, as the server counts it)."""
    def call(body):
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json",
                                                              "Authorization": f"Bearer {key}"})
        try:
            urllib.request.urlopen(req, timeout=30).read()
        except Exception:
            pass

    with concurrent.futures.ThreadPoolExecutor(width) as pool:
        start = time.monotonic()
        futs = []
        for i, body in enumerate(bodies):
            wait = start + i * 60 / limit - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            futs.append(pool.submit(call, body))
        for f in futs:
            f.result()


def tool_result(log, throttled, limit):
    """One tool's line of the result: requests, seconds, rate, share of the limit, 429s."""
    r = rate(log)
    return {"requests": len(log), "seconds": round(span(log), 2), "per_min": round(r, 1),
            "share": round(r / limit, 4), "http_429": throttled}


def print_rates(out, limit, ours_log, ours_429, peer_log, peer_429):
    """The table of both tools and the ratio; returns the ratio (None without a peer rate)."""
    ours, peer = rate(ours_log), rate(peer_log)
    print(f"  {'tool':10} {'requests':>8} {'seconds':>8} {'req/min':>8} {'of limit':>9} {'429s':>5}", file=out)
    for tool, log, r, t429 in (("vidcurate", ours_log, ours, ours_429), ("python", peer_log, peer, peer_429)):
        print(f"  {tool:10} {len(log):8d} {span(log):8.1f} {r:8.1f} {r / limit:9.1%} {t429:5d}", file=out)
    ratio = round(ours / peer, 4) if peer else None
    print(f"  ratio vidcurate / python: {ratio or 0:.3f}   (target: vidcurate >= 95 % of the limit, no 429)",
          file=out)
    return ratio


def limited_server(limit, latency, template, answer):
    """A stand-in OpenAI server on 127.0.0.1 that counts a sliding minute and answers 429 with
    Retry-After past `limit` requests, else after `latency` s the chat completion `template`
    with `answer(request_json, prompt_text, path)` (a dict) as its content; a body that is no
    chat request is answered with `answer({}, "", path)`. Returns (server, state):
    state.log (arrival times of answered requests), state.bodies, state.throttled."""
    import collections
    import http.server
    import json
    import math
    import threading

    class State:
        arrivals = collections.deque()
        log, bodies, throttled = [], [], 0
        lock = threading.Lock()

        def reset(self):
            with self.lock:
                self.arrivals.clear()
                self.log, self.bodies, self.throttled = [], [], 0

    state = State()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            now = time.monotonic()
            with state.lock:
                while state.arrivals and now - state.arrivals[0] > 60:
                    state.arrivals.popleft()
                over = len(state.arrivals) >= limit
                if over:
                    state.throttled += 1
                    retry = max(1, math.ceil(60 - (now - state.arrivals[0])))
                else:
                    state.arrivals.append(now)
                    state.log.append(now)
                    state.bodies.append(raw)
            time.sleep(latency)
            if over:
                out, status = b'{"error":{"message":"Rate limit reached.","type":"requests","code":"rate_limit_exceeded"}}', 429
            else:
                try:
                    v = json.loads(raw)
                    c = v["messages"][0]["content"]
                    text = c if isinstance(c, str) else " ".join(
                        p.get("text", "") for p in c if isinstance(p, dict))
                except (ValueError, KeyError, TypeError, IndexError):
                    v, text = {}, ""
                body = dict(template)
                body["choices"] = [dict(template["choices"][0], message=dict(
                    template["choices"][0]["message"], content=json.dumps(answer(v, text, self.path))))]
                out, status = json.dumps(body).encode(), 200
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            if over:
                self.send_header("Retry-After", str(retry))
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, state
