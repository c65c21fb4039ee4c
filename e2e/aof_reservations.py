"""The request ids the AOF under argv[1] (Redis 7's multi-part appendonlydir) writes to the outbox
key argv[2], one a line (e2e/faults.sh aof_reservations sorts them)."""
import os, sys
d, key = sys.argv[1], sys.argv[2].encode()
manifest = next(f for f in os.listdir(d) if f.endswith(".manifest"))
incr = []
for line in open(os.path.join(d, manifest)):
    w = line.split()
    kv = dict(zip(w[0::2], w[1::2]))
    if kv.get("type") == "i":
        incr.append((int(kv["seq"]), kv["file"]))
ids, multi = set(), None
for _, name in sorted(incr):
    b, i = open(os.path.join(d, name), "rb").read(), 0
    try:
        while i < len(b):
            if b[i:i + 1] != b"*":
                raise ValueError("not a command")
            j = b.index(b"\r\n", i)
            n, i, args = int(b[i + 1:j]), j + 2, []
            for _ in range(n):
                j = b.index(b"\r\n", i)
                m, i = int(b[i + 1:j]), j + 2
                if i + m + 2 > len(b):
                    raise ValueError("cut off")
                args.append(b[i:i + m])
                i += m + 2
            cmd = args[0].upper()
            if cmd == b"MULTI":
                multi = set()
            elif cmd == b"EXEC":
                ids |= multi or set()
                multi = None
            elif len(args) >= 4 and cmd == b"HSET" and args[1] == key:
                (ids if multi is None else multi).update(a.decode() for a in args[2::2])
    except ValueError:
        pass
for i in ids:
    print(i)
