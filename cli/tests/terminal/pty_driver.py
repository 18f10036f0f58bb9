"""Runs a command in a new pseudo-terminal, as a user at a terminal would, for the tests.

usage: pty_driver.py WAIT_FOR TYPE -- COMMAND...
Waits (at most 20 s) until the terminal shows WAIT_FOR, then types TYPE (Python escapes:
"\\x03" is Ctrl-C), waits (at most 20 s) for the command to end, and prints what the terminal
showed and then "EXIT <code>". A command still running then is killed with its session, and
"EXIT hung" printed.
"""
import os, pty, select, signal, subprocess, sys, time

wait_for = sys.argv[1].encode()
typed = sys.argv[2].encode().decode("unicode_escape").encode()
command = sys.argv[4:]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(command[0], command)

shown = b""
def read(limit):
    global shown
    r, _, _ = select.select([fd], [], [], limit)
    if r:
        try:
            shown += os.read(fd, 4096)
        except OSError:
            pass

deadline = time.time() + 20
while wait_for not in shown and time.time() < deadline:
    read(0.05)
os.write(fd, typed)
status = None
deadline = time.time() + 20
while status is None and time.time() < deadline:
    read(0.05)
    done, st = os.waitpid(pid, os.WNOHANG)
    if done:
        status = os.waitstatus_to_exitcode(st)
if status is None:
    # Everything the command started is in the session the pty made for it.
    subprocess.run(["pkill", "-KILL", "-s", str(pid)])
    os.waitpid(pid, 0)
read(0.1)
sys.stdout.write(shown.decode(errors="replace"))
print("\nEXIT", "hung" if status is None else status)
