"""bench/polling.sh's verdict: the drain rate alone (argv[1]) and under the flood (argv[2])."""
import sys
q, f = float(sys.argv[1]), float(sys.argv[2])
ratio = f / q
print(f"drain rate alone:       {q:10.0f} orders/s")
print(f"drain rate under flood: {f:10.0f} orders/s")
print(f"ratio: {ratio:.2f} ({'within' if ratio >= 0.8 else 'NOT within'} 20%)")
