"""One row of bench/observe.sh's table: a variant's sums over its rounds against the "off" one's."""
import sys
v, rps, p50, p99, t, n, rps0, t0, n0, hz, rounds = sys.argv[1:]
rounds = int(rounds); hz = int(hz)
cpu = int(t) * 1e6 / hz / max(1, int(n))
cpu0 = int(t0) * 1e6 / hz / max(1, int(n0))
print(f"{v:<10} {float(rps)/rounds:12.0f} {int(p50)/rounds/1000:8.2f} {int(p99)/rounds/1000:8.2f} "
      f"{cpu:14.2f} {cpu/cpu0:12.3f} {float(rps)/float(rps0):12.3f}")
