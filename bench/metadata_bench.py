"""Per-request cost of the metadata backends: an ember-server with --auth
local on SQLite and on a real PostgreSQL (started here, tests/lib/clickhouse.py),
a service token, 2000 sequential GETs on one kept-alive connection each.
Run from the repository root after make: python3 bench/metadata_bench.py
(docs/internals/metadata.md, "Costs")."""
import http.client
import os
import sys
import tempfile
import time
sys.path[:0] = ["tests/lib", "tests/integration"]  # the test harness
from clickhouse import Postgres
from conftest import pg_database
from harness import Server
from test_auth import Session, ADMIN, PASSWORD
pg = Postgres(); pg.start()
try:
    for backend in ("sqlite", "postgres"):
        d = tempfile.mkdtemp()
        pw = os.path.join(d, "pw"); open(pw, "w").write(PASSWORD + "\n")
        flags = [] if backend == "sqlite" else ["--metadata", pg_database(pg)]
        srv = Server(os.path.join(d, "data"), None, "--auth", "local", "--admin-email", ADMIN,
                     "--admin-password-file", pw, *flags).start()
        s = Session(srv); s.login(ADMIN, PASSWORD)
        st, tok = s.call("POST", "/public/api/v1/service-tokens", {"name": "b", "scopes": ["**:*"]})
        c = http.client.HTTPConnection("127.0.0.1", srv.port)
        h = {"Authorization": "Bearer " + tok["token"]}
        for path in ("/api/v1/auth/me", "/public/api/v1/projects"):
            n = 2000
            t0 = time.perf_counter()
            for _ in range(n):
                c.request("GET", path, headers=h); r = c.getresponse(); r.read(); assert r.status == 200
            dt = time.perf_counter() - t0
            print(f"{backend:8s} GET {path:28s} {n} requests, one connection: {dt/n*1e6:7.0f} us each")
        srv.stop()
finally:
    pg.cleanup()
