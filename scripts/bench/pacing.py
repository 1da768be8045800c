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
