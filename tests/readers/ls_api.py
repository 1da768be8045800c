"""The one Label Studio HTTP API call the test drivers make, with its token (a failing call
ends the driver with the method, path, status and body)."""
import json
import sys
import urllib.error
import urllib.request


def client(base, token):
    def call(method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(base + path, data=data, method=method, headers={
            "Authorization": f"Token {token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                raw = r.read()
                return json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            sys.exit(f"{method} {path}: HTTP {e.code}: {e.read()[:2000]!r}")
    return call
