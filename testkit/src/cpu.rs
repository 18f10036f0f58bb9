//! CPU time used by the local masters and by this process: how a benchmark tells what its work
//! cost the masters from what it cost the client, where the machine's CPUs bound a figure.

use std::io;
use std::time::Duration;

use nix::sys::resource::{UsageWho, getrusage};

use crate::LocalNodes;

/// The masters of a [`LocalNodes`] as they run when it is made: what reads the CPU time they
/// have used, and can be handed to another thread or task.
#[derive(Debug, Clone)]
pub struct MastersCpu {
    pids: Vec<u32>,
}

impl MastersCpu {
    /// CPU time these masters have used since they started, every thread counted (from the
    /// kernel's per-thread accounting, to the nanosecond).
    ///
    /// # Errors
    ///
    /// Where `/proc/<pid>/task/<tid>/schedstat` cannot be read (not Linux, a kernel without
    /// it, or a master that has stopped since).
    pub fn used(&self) -> io::Result<Duration> {
        let mut used = Duration::ZERO;
        for &pid in &self.pids {
            used += process_cpu(pid)?;
        }
        Ok(used)
    }
}

impl LocalNodes {
    /// What reads the CPU time of the masters running now (a master restarted later is not
    /// among them).
    pub fn masters_cpu(&self) -> MastersCpu {
        self.first_masters_cpu(self.len())
    }

    /// What reads the CPU time of the first `n` masters, those of them running now.
    pub fn first_masters_cpu(&self, n: usize) -> MastersCpu {
        MastersCpu {
            pids: (0..n.min(self.len())).filter_map(|i| self.pid(i)).collect(),
        }
    }
}

/// The CPU time of some masters and of this process when a stretch of work began: what the
/// work since cost each of its operations.
#[derive(Debug, Clone)]
pub struct CpuMeter {
    masters: MastersCpu,
    at_start: Option<(Duration, Duration)>,
}

/// What one operation cost the CPUs, in µs: the masters' and this process's.
#[derive(Debug, Clone, Copy)]
pub struct CpuPer {
    /// The masters', summed over them.
    pub masters_us: f64,
    /// This process's, every thread counted.
    pub process_us: f64,
}

impl CpuMeter {
    /// Starts counting now, for `masters` and this process.
    pub fn start(masters: &MastersCpu) -> Self {
        CpuMeter {
            masters: masters.clone(),
            at_start: masters_and_own(masters),
        }
    }

    /// What the work since the start cost in all, in µs; `None` where the CPU time could not
    /// be read.
    pub fn spent(&self) -> Option<CpuPer> {
        self.per(1)
    }

    /// What the work since the start cost each of `count` operations; `None` where the CPU
    /// time could not be read.
    pub fn per(&self, count: usize) -> Option<CpuPer> {
        let (masters_before, own_before) = self.at_start?;
        let (masters_after, own_after) = masters_and_own(&self.masters)?;
        let per = |spent: Duration| spent.as_secs_f64() * 1e6 / count.max(1) as f64;
        Some(CpuPer {
            masters_us: per(masters_after.saturating_sub(masters_before)),
            process_us: per(own_after.saturating_sub(own_before)),
        })
    }
}

fn masters_and_own(masters: &MastersCpu) -> Option<(Duration, Duration)> {
    Some((masters.used().ok()?, own_cpu_used().ok()?))
}

/// CPU time this process has used so far, user and system, its ended threads included.
///
/// # Errors
///
/// When the kernel does not say.
pub fn own_cpu_used() -> io::Result<Duration> {
    let usage = getrusage(UsageWho::RUSAGE_SELF).map_err(io::Error::from)?;
    Ok(timeval(usage.user_time()) + timeval(usage.system_time()))
}

fn timeval(t: nix::sys::time::TimeVal) -> Duration {
    let micros = i128::from(t.tv_sec()) * 1_000_000 + i128::from(t.tv_usec());
    Duration::from_micros(u64::try_from(micros).unwrap_or(0))
}

/// CPU time of every live thread of process `pid`: the first field of each thread's
/// `schedstat` is its time on a CPU, in nanoseconds (`/proc/<pid>/stat` counts in ticks of
/// 10 ms, too coarse for a run of a second or two).
fn process_cpu(pid: u32) -> io::Result<Duration> {
    let mut used = Duration::ZERO;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let path = task?.path().join("schedstat");
        // A thread that ended between the listing and the read has nothing left to count.
        let Ok(stat) = std::fs::read_to_string(&path) else {
            continue;
        };
        used += Duration::from_nanos(on_cpu_ns(&stat).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {stat:?} is not a schedstat line", path.display()),
            )
        })?);
    }
    Ok(used)
}

/// The time on a CPU, in ns, from a `schedstat` line (`<on cpu ns> <waiting ns> <slices>`).
fn on_cpu_ns(schedstat: &str) -> Option<u64> {
    schedstat.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn a_schedstat_line_gives_its_first_field() {
        assert_eq!(on_cpu_ns("181281 0 1\n"), Some(181_281));
        assert_eq!(on_cpu_ns(""), None);
        assert_eq!(on_cpu_ns("x 0 1"), None);
    }

    #[test]
    fn own_cpu_grows_with_work_done() {
        let before = own_cpu_used().unwrap();
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let spent = own_cpu_used().unwrap() - before;
        assert!(
            spent >= Duration::from_millis(20),
            "{spent:?} after 50 ms of work"
        );
    }

    /// A script that keeps its master on a CPU for as long as it loops; it answers 5000000.
    const BUSY_SCRIPT: &str = "local n = 0 for i = 1, 5000000 do n = n + 1 end return n";

    /// Sends one command in RESP to master `i` of `nodes`, after AUTH, and reads until its
    /// answer (the last of the two) has come.
    fn command(nodes: &LocalNodes, i: usize, args: &[&str]) -> String {
        use std::io::{Read, Write};
        let mut resp = String::new();
        for command in [&["AUTH", nodes.password.as_str()][..], args] {
            resp.push_str(&format!("*{}\r\n", command.len()));
            for arg in command {
                resp.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
            }
        }
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", nodes.port(i))).unwrap();
        stream.write_all(resp.as_bytes()).unwrap();
        let mut reply = String::new();
        let mut chunk = [0u8; 256];
        // "+OK" for AUTH, then the command's own answer.
        while reply.matches("\r\n").count() < 2 {
            let n = stream.read(&mut chunk).unwrap();
            assert!(n > 0, "the master closed the connection: {reply:?}");
            reply.push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
        reply
    }

    #[test]
    fn the_masters_cpu_grows_with_their_work() {
        let nodes = LocalNodes::start(2).unwrap();
        let masters = nodes.masters_cpu();
        let before = masters.used().unwrap();
        let reply = command(&nodes, 1, &["EVAL", BUSY_SCRIPT, "0"]);
        assert!(reply.ends_with(":5000000\r\n"), "{reply:?}");
        let spent = masters.used().unwrap() - before;
        assert!(spent >= Duration::from_millis(5), "{spent:?}");
    }

    #[test]
    fn a_meter_divides_what_the_work_cost_by_its_operations() {
        let nodes = LocalNodes::start(1).unwrap();
        let meter = CpuMeter::start(&nodes.masters_cpu());
        command(&nodes, 0, &["EVAL", BUSY_SCRIPT, "0"]);
        let whole = meter.per(1).unwrap();
        let tenth = meter.per(10).unwrap();
        assert!(whole.masters_us >= 5_000.0, "{whole:?}");
        // Read again later, so a little more; but about a tenth of the whole.
        assert!(
            tenth.masters_us >= whole.masters_us / 10.0
                && tenth.masters_us < whole.masters_us / 5.0,
            "{whole:?} {tenth:?}"
        );
    }
}
