"""The soak of process churn (bench/agent_soak.sh), short: 2 minutes of
40 distinct programs without frame pointers coming and going, a C project
compiled again and again, Python and Go, under the agent at 19 Hz. The
share of samples with an error frame must not grow over the run and stays
under 2 % once the agent has seen the host (the first interval reads
every process as new); the agent's memory stays under its 100 MB bound and
it does not die (the script fails when it does). The 30-minute run is in
`make bench`; its figures are in docs/performance.md."""

import os
import subprocess

from conftest import require_root

from harness import ROOT

MINUTES = 2
INTERVAL = 30


def parse(out):
    """The script's table: one dict per interval."""
    rows = []
    for line in out.splitlines():
        f = line.split()
        if len(f) != 12 or not f[0].isdigit():
            continue
        rows.append({"samples": int(f[1]), "error_pct": float(f[2]),
                     "rss_mib": float(f[9]), "peak_mib": float(f[10])})
    return rows


def test_soak_error_share_holds_and_memory_stays_bounded():
    require_root()
    r = subprocess.run([os.path.join(ROOT, "bench", "agent_soak.sh"), str(MINUTES), "40"], cwd=ROOT,
                       env=dict(os.environ, EMBER_SOAK_INTERVAL=str(INTERVAL)),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    print(r.stdout)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = parse(r.stdout)
    assert len(rows) >= MINUTES * 60 // INTERVAL - 1, r.stdout
    assert all(x["samples"] > 100 for x in rows), rows
    first, rest = rows[0], rows[1:]
    later = sum(x["samples"] * x["error_pct"] for x in rest) / sum(x["samples"] for x in rest)
    print(f"error share: first interval {first['error_pct']:.2f} %, later {later:.2f} %, "
          f"last {rows[-1]['error_pct']:.2f} %")
    # Not worse at the end than at the start (a point of slack: 30 s
    # intervals hold ~1 000 samples, where 10 samples are a point).
    assert rows[-1]["error_pct"] <= max(first["error_pct"], 1.0) + 1.0, rows
    # Under 2 % in the 30-minute bench (docs/performance.md); 1.7 % here
    # on a quiet host, a loaded CI host adds new processes' misses.
    assert later < 2.5, rows
    # MiB here; the bound is 100 MB (95.4 MiB).
    assert max(x["peak_mib"] for x in rows) < 95.0, rows
