//! The long help texts of `serve`, `doctor` and `run`: examples, exit codes and what each
//! command tells the processes it runs.

pub(super) const SERVE_HELP: &str = "\
Try it with nothing configured (starts 3 local redis-server masters, stopped on exit):
  redquorum serve --dev
  curl -s -X POST localhost:7700/v1/locks/demo -d '{\"ttl_ms\": 30000}'

Settings come from flags, else environment variables, else the --config TOML file, else
defaults. The bearer token comes from REDQUORUM_AUTH_TOKEN, else --auth-token-file. Without
a token the server only listens on loopback addresses, unless --allow-unauthenticated.
SIGINT or SIGTERM: stop accepting, end sessions by releasing their locks, finish requests in
flight, exit (and stop the --dev masters).";

pub(super) const DOCTOR_HELP: &str = "\
Example, with the options the clients will use:
  redquorum doctor --nodes redis://a:6379,redis://b:6379,redis://c:6379 --max-ttl 5m

Errors (unsafe): a master unreachable, a replica, the same server listed twice, a
maxmemory-policy other than noeviction, a command or key prefix the ACL denies, fewer masters
able to vote than the quorum, and a master without durable persistence (appendonly yes and
appendfsync always), which --allow-non-durable makes a warning (with --require-durable such a
master cannot vote either). Warnings (safe): a clock more than 1s off, a master that lost its
data after a restart (in quarantine, when it cannot vote; or without the deployment marker,
when it votes only with --quarantine 0s).

Exit codes:
  0    safe for the options given (warnings may be printed)
  78   not safe: at least one error
  64   bad arguments (node URLs, durations)";

pub(super) const RUN_HELP: &str = "\
Example: serialise a nightly job across machines, waiting up to 5 minutes for the lock:
  redquorum run --nodes redis://a:6379,redis://b:6379,redis://c:6379 \\
      --lock nightly-backup --ttl 30s --wait 5m -- /usr/local/bin/backup --full

Kinds: by default the lock is reentrant, owned by REDQUORUM_OWNER: a `redquorum run` of the
same name inside the command (which inherits REDQUORUM_OWNER) re-enters it instead of waiting
for it, and every other run waits. --read and --write take a read-write lock (any number of
readers at once, or one writer; a waiting writer holds back new readers); --permits P takes
one of P permits of a semaphore (at most P commands at once; every run of the name must give
the same P).
  redquorum run --lock reports --read -- ./export-report
  redquorum run --lock reports --write -- ./rebuild-reports
  redquorum run --lock gpu --permits 2 -- ./train
Several --lock: every name is held (of the one kind given), taken all or nothing in the names'
byte order, so that runs over overlapping names cannot deadlock:
  redquorum run --lock account:17 --lock account:4 -- ./transfer 17 4 100

The command sees REDQUORUM_LOCK (the name), REDQUORUM_TOKEN (the holder's token),
REDQUORUM_FENCE (the fencing token, to send with every write to the protected resource),
REDQUORUM_OWNER (the owner id: commands under one run count as one holder of its reentrant
locks; it is a capability, so keep it out of logs) and REDQUORUM_KIND (reentrant, read, write
or semaphore:P; `redquorum status` and `redquorum release` of a name in REDQUORUM_LOCK default
to it, so that `redquorum release --lock NAME` inside the command releases the run's lock;
the run, told through the file in REDQUORUM_RUN_RELEASES, lets the command run on without it).
With several --lock, REDQUORUM_LOCK, REDQUORUM_TOKEN and REDQUORUM_FENCE hold one line per
lock, in the order they were taken; `redquorum release --lock NAME` takes NAME's line.

SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGALRM sent to redquorum are passed on
to the command (redquorum does not die of them); the lock is released after the command exits,
and redquorum exits with the command's code. Before the lock is taken, any of them ends the
wait: the command is not run, and redquorum exits with 128+N. At a terminal, where the command shares the
terminal's foreground process group, Ctrl-C (SIGINT) and Ctrl-\\ (SIGQUIT) reach the command
from the terminal itself and are not passed on again (nor is a SIGINT or SIGQUIT sent to
redquorum alone then). If redquorum itself is killed (SIGKILL), the command's process is
killed too (on Linux, by a parent-death signal; processes it started go only if it takes them
with it), since nothing renews the lock any more.

If the lock is lost while the command runs (a majority of nodes unreachable for longer than
the lock's validity), the command gets SIGTERM, then SIGKILL after --kill-after. Unless
redquorum runs in the foreground of a terminal (cron, CI, in the background, whatever stdin
is), the command runs in its own process group, and these signals go to the whole group (a
shell's children too), followed by SIGCONT, so that a stopped command acts on them.

Nodes: --nodes, else REDQUORUM_NODES, else `nodes = [...]` in the TOML file named by
--config or REDQUORUM_CONFIG.

Exit codes:
  the command's own    the command ran (128+N if it was killed by signal N)
  128+N                signal N came while the lock was waited for; the command was not run
  75                   the lock was not obtained within --wait; the command was not run
  69                   no quorum of masters can grant it (down, quarantined, replicas,
                       misconfigured: the message names each); the command was not run
  76                   the lock was lost while the command ran; the command was terminated
  64                   bad arguments (names, durations, node URLs)
  126, 127             the command could not be executed / was not found
  70                   any other failure";
