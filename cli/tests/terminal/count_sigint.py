"""A command for the tests that counts the SIGINTs it gets: it says "child started", waits
(at most 20 s) for one, waits 1 s more for any other, writes the count to the file named by its
argument and exits with the count. Each delivery is counted where the C-level handler writes a
byte to the wakeup pipe: Python may run its own handler once for two deliveries close
together."""
import os, signal, sys, time

r, w = os.pipe()
os.set_blocking(r, False)
os.set_blocking(w, False)
signal.signal(signal.SIGINT, lambda s, f: None)
signal.set_wakeup_fd(w, warn_on_full_buffer=False)
print("child started", flush=True)

def count():
    try:
        return len(os.read(r, 1024))
    except BlockingIOError:
        return 0

# Running, not sleeping, while the signals come: a signal sent to a sleeping process waits for
# it to be scheduled, and a second one sent meanwhile would merge with the first.
got = 0
deadline = time.time() + 20
while time.time() < deadline and not got:
    got += count()
deadline = time.time() + 1
while time.time() < deadline:
    got += count()
with open(sys.argv[1], "w") as f:
    f.write(f"{got}\n")
sys.exit(got)
