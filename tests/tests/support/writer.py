"""A paced buffered writer for the daemon tests: writes `--rate` MB/s in 1 MiB chunks from
`--threads` threads for `--seconds`, then sleeps `--then-sleep` seconds (alive but quiet).
Each thread truncates its file every 256 MiB so the test never fills the disk; truncation drops
the pages, so every chunk dirties fresh page cache, as a real writer does."""
import argparse, os, sys, threading, time

p = argparse.ArgumentParser()
p.add_argument("--dir", required=True)
p.add_argument("--rate", type=float, default=150.0, help="MB/s per thread")
p.add_argument("--seconds", type=float, default=6.0)
p.add_argument("--threads", type=int, default=1)
p.add_argument("--then-sleep", type=float, default=0.0)
p.add_argument("--name-hex", help="process name (comm) to take, as hex bytes: any bytes, as a "
               "hostile program could choose")
a = p.parse_args()
if a.name_hex:
    import ctypes
    PR_SET_NAME = 15
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, bytes.fromhex(a.name_hex), 0, 0, 0)

CHUNK = b"\0" * (1 << 20)
CAP = 256 << 20

def write(i):
    path = os.path.join(a.dir, "w%d" % i)
    with open(path, "wb", buffering=0) as f:
        start = time.monotonic()
        written = 0
        while True:
            elapsed = time.monotonic() - start
            if elapsed >= a.seconds:
                break
            ahead = written / (a.rate * 1e6) - elapsed
            if ahead > 0:
                time.sleep(ahead)
            if f.tell() >= CAP:
                f.truncate(0)
                f.seek(0)
            f.write(CHUNK)
            written += len(CHUNK)

threads = [threading.Thread(target=write, args=(i,)) for i in range(a.threads)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("done writing", flush=True)
time.sleep(a.then_sleep)
