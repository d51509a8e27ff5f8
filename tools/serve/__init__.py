"""`python -m tools.serve`: the HTTP API (__main__.py) and its parts: the routes (app.py),
micro-batching and the decode budget (batching.py), timed connections and the host check
(transport.py), the fast path and the limit (guard.py) and the offline docs (docs.py)."""
