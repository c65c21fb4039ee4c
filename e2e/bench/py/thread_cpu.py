"""Each thread name's CPU µs per request between two thread_ticks lines (argv 1, 2), over
argv[3] requests at argv[4] ticks a second, the busiest first (e2e/bench/lib.sh)."""
import sys
before, after, n, hz = sys.argv[1], sys.argv[2], max(1, int(sys.argv[3])), int(sys.argv[4])
b = dict(w.split("=") for w in before.split())
us = {k: (int(v) - int(b.get(k, 0))) * 1e6 / hz / n for k, v in (w.split("=") for w in after.split())}
print(", ".join(f"{k} {v:.1f}" for k, v in sorted(us.items(), key=lambda kv: -kv[1]) if v >= 0.5))
