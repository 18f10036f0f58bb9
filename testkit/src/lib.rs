//! Local `redis-server` processes on free loopback ports, for development, tests and benchmarks.
//!
//! [`LocalNodes`] starts N independent masters, each in its own temporary directory, and stops
//! them when dropped, or when the process ends however it ends (where util-linux's `setpriv`
//! runs; see `tied.rs`). It can kill (SIGKILL), pause (SIGSTOP), resume (SIGCONT) and restart any
//! one of them, which is how the test suite makes faults.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

mod cpu;
mod tied;

pub use cpu::{CpuMeter, CpuPer, MastersCpu, own_cpu_used};

/// Environment variable naming the `redis-server` binary to run (default: from `PATH`).
pub const REDIS_SERVER_ENV: &str = "REDQUORUM_REDIS_SERVER";

/// How long a starting `redis-server` may take to answer PING.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Ports of every set of masters alive in this process, stopped masters included: a master
/// restarts on its own port, and a set starting meanwhile (tests run side by side) must not
/// take that port while it is free.
static PORTS_IN_USE: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());

fn ports_in_use() -> std::sync::MutexGuard<'static, Vec<u16>> {
    PORTS_IN_USE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One local master.
#[derive(Debug)]
struct LocalNode {
    port: u16,
    /// The port it takes TLS connections on, when it does.
    tls_port: Option<u16>,
    dir: PathBuf,
    child: Option<Child>,
}

/// The files of a set's TLS: its own certificate authority, and a certificate from it for
/// `127.0.0.1` and `localhost` that every master of the set serves.
#[derive(Debug)]
struct TlsFiles {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

/// N local masters on loopback; all are killed when this is dropped, or when the process ends.
#[derive(Debug)]
pub struct LocalNodes {
    binary: PathBuf,
    /// Every set of nodes has its own password, so that a client still pointed at a port this
    /// set no longer uses (a killed node's, say) can never talk to another set's server there.
    password: String,
    args: Vec<String>,
    tls: Option<TlsFiles>,
    nodes: Vec<LocalNode>,
    // Last, so the processes are gone before their directories are removed.
    _root: tempfile::TempDir,
}

impl LocalNodes {
    /// Starts `n` masters without persistence (`--save "" --appendonly no`).
    ///
    /// # Errors
    ///
    /// When `redis-server` cannot be found or a server does not come up; the message says how
    /// to install it or what the server logged.
    pub fn start(n: usize) -> io::Result<Self> {
        Self::start_with(n, &[])
    }

    /// Starts `n` masters with extra `redis-server` arguments (for example
    /// `["--appendonly", "yes", "--appendfsync", "always"]`), which come after the defaults and
    /// so override them.
    ///
    /// # Errors
    ///
    /// As [`LocalNodes::start`].
    pub fn start_with(n: usize, extra_args: &[&str]) -> io::Result<Self> {
        Self::start_inner(n, extra_args, false)
    }

    /// Starts `n` masters that take TLS connections too (see [`LocalNodes::tls_url`]), with a
    /// certificate for `127.0.0.1` from a certificate authority of their own
    /// ([`LocalNodes::ca_pem`]), made with `openssl`.
    ///
    /// # Errors
    ///
    /// As [`LocalNodes::start`], and when `openssl` cannot make the certificates.
    pub fn start_tls(n: usize) -> io::Result<Self> {
        Self::start_inner(n, &[], true)
    }

    fn start_inner(n: usize, extra_args: &[&str], tls: bool) -> io::Result<Self> {
        let binary = find_redis_server()?;
        let root = tempfile::Builder::new()
            .prefix("redquorum-dev-")
            .tempdir()?;
        let tls = if tls {
            Some(make_certificates(root.path())?)
        } else {
            None
        };
        let mut nodes = LocalNodes {
            binary,
            password: format!("{:032x}", rand::random::<u128>()),
            args: extra_args.iter().map(|a| (*a).to_owned()).collect(),
            tls,
            nodes: Vec::with_capacity(n),
            _root: root,
        };
        for i in 0..n {
            let dir = nodes._root.path().join(format!("node{i}"));
            std::fs::create_dir_all(&dir)?;
            let node = nodes.spawn_on_free_port(dir)?;
            nodes.nodes.push(node);
        }
        Ok(nodes)
    }

    /// How many masters there are.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// `redis://:PASSWORD@127.0.0.1:PORT` for each master.
    pub fn urls(&self) -> Vec<String> {
        (0..self.nodes.len()).map(|i| self.url(i)).collect()
    }

    /// The URL of master `i`.
    pub fn url(&self, i: usize) -> String {
        format!(
            "redis://:{}@127.0.0.1:{}",
            self.password, self.nodes[i].port
        )
    }

    /// `rediss://:PASSWORD@127.0.0.1:PORT` of master `i`, on its TLS port; `None` unless the
    /// masters were started with [`LocalNodes::start_tls`].
    pub fn tls_url(&self, i: usize) -> Option<String> {
        let port = self.nodes[i].tls_port?;
        Some(format!("rediss://:{}@127.0.0.1:{port}", self.password))
    }

    /// The certificate (PEM) of the authority the masters' TLS certificates come from.
    ///
    /// # Errors
    ///
    /// When the masters take no TLS connections, or the file cannot be read.
    pub fn ca_pem(&self) -> io::Result<Vec<u8>> {
        let tls = self
            .tls
            .as_ref()
            .ok_or_else(|| io::Error::other("masters started without TLS"))?;
        std::fs::read(&tls.ca)
    }

    /// The port of master `i`.
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    /// The process id of master `i`, while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].child.as_ref().map(Child::id)
    }

    /// Kills master `i` with SIGKILL and waits for it to be gone.
    ///
    /// # Errors
    ///
    /// When the process cannot be signalled or waited for.
    pub fn kill(&mut self, i: usize) -> io::Result<()> {
        if let Some(mut child) = self.nodes[i].child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Stops master `i` with SIGSTOP: it keeps its connections but answers nothing.
    ///
    /// # Errors
    ///
    /// When the master is not running or cannot be signalled.
    pub fn pause(&self, i: usize) -> io::Result<()> {
        self.signal(i, Signal::SIGSTOP)
    }

    /// Resumes a paused master `i` with SIGCONT.
    ///
    /// # Errors
    ///
    /// When the master is not running or cannot be signalled.
    pub fn resume(&self, i: usize) -> io::Result<()> {
        self.signal(i, Signal::SIGCONT)
    }

    /// Starts master `i` again on the same port and directory (killing it first if it runs).
    /// Without persistence it comes back empty.
    ///
    /// # Errors
    ///
    /// When it does not come back up.
    pub fn restart(&mut self, i: usize) -> io::Result<()> {
        self.kill(i)?;
        let port = self.nodes[i].port;
        let tls_port = self.nodes[i].tls_port;
        let dir = self.nodes[i].dir.clone();
        // The port was just freed by our own process; no set of this process takes it (see
        // PORTS_IN_USE), and another process rarely draws the same one.
        let child = self.spawn(port, tls_port, &dir)?;
        self.nodes[i].child = Some(child);
        Ok(())
    }

    fn signal(&self, i: usize, signal: Signal) -> io::Result<()> {
        let pid = self
            .pid(i)
            .ok_or_else(|| io::Error::other(format!("node {i} is not running")))?;
        let pid = i32::try_from(pid).map_err(io::Error::other)?;
        kill(Pid::from_raw(pid), signal).map_err(io::Error::from)
    }

    fn spawn_on_free_port(&self, dir: PathBuf) -> io::Result<LocalNode> {
        // Another process may take the port between our probe and redis-server's bind; try again
        // with a new port when that happens.
        let mut last = None;
        for _ in 0..5 {
            let port = free_port()?;
            let tls_port = match self.tls {
                Some(_) => Some(free_port()?),
                None => None,
            };
            match self.spawn(port, tls_port, &dir) {
                Ok(child) => {
                    ports_in_use().push(port);
                    ports_in_use().extend(tls_port);
                    return Ok(LocalNode {
                        port,
                        tls_port,
                        dir,
                        child: Some(child),
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("could not start redis-server")))
    }

    fn spawn(&self, port: u16, tls_port: Option<u16>, dir: &Path) -> io::Result<Child> {
        let log = dir.join("redis.log");
        // Tied to this process, so that a bench or a test killed outright leaves no master
        // running.
        let mut command = tied::command(&self.binary);
        if let (Some(tls), Some(tls_port)) = (&self.tls, tls_port) {
            command
                .args([
                    "--tls-port",
                    &tls_port.to_string(),
                    "--tls-auth-clients",
                    "no",
                ])
                .arg("--tls-cert-file")
                .arg(&tls.cert)
                .arg("--tls-key-file")
                .arg(&tls.key)
                .arg("--tls-ca-cert-file")
                .arg(&tls.ca);
        }
        command
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(&log)
            .args(["--requirepass", &self.password])
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = tied::spawn(command)?;
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                let logged = std::fs::read_to_string(&log).unwrap_or_default();
                let tail: Vec<&str> = logged.lines().rev().take(5).collect();
                return Err(io::Error::other(format!(
                    "redis-server on port {port} exited with {status}: {}",
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                )));
            }
            // The pid check matters: if another process's server already has this port, ours
            // fails to bind and exits, but that other server would answer a plain PING.
            if ready_server_pid(port, &self.password) == Some(child.id()) {
                return Ok(child);
            }
            if started.elapsed() > START_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "redis-server on port {port} did not answer PING within {START_TIMEOUT:?}"
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for LocalNodes {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                // SIGKILL works on paused processes too.
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let mine: Vec<u16> = self
            .nodes
            .iter()
            .flat_map(|n| std::iter::once(n.port).chain(n.tls_port))
            .collect();
        ports_in_use().retain(|p| !mine.contains(p));
    }
}

/// Makes a certificate authority, and a certificate from it for `127.0.0.1` and `localhost`,
/// in `dir`, with `openssl`.
fn make_certificates(dir: &Path) -> io::Result<TlsFiles> {
    let files = TlsFiles {
        ca: dir.join("ca.crt"),
        cert: dir.join("server.crt"),
        key: dir.join("server.key"),
    };
    let (ca_key, csr, ext) = (
        dir.join("ca.key"),
        dir.join("server.csr"),
        dir.join("server.ext"),
    );
    std::fs::write(&ext, "subjectAltName=IP:127.0.0.1,DNS:localhost\n")?;
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let run = |args: &[&std::ffi::OsStr]| -> io::Result<()> {
        let out = Command::new("openssl")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "openssl: {e}; install it (Debian/Ubuntu: `apt-get install -y openssl`)"
                    ),
                )
            })?;
        if out.status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "openssl {:?} failed: {}",
                args,
                String::from_utf8_lossy(&out.stderr)
            )))
        }
    };
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    let mut ca: Vec<&std::ffi::OsStr> = vec![os("req"), os("-x509")];
    ca.extend(ec.iter().map(|a| os(a)));
    ca.extend([
        os("-days"),
        os("2"),
        os("-subj"),
        os("/CN=redquorum test CA"),
        os("-keyout"),
        ca_key.as_os_str(),
        os("-out"),
        files.ca.as_os_str(),
    ]);
    run(&ca)?;
    let mut req: Vec<&std::ffi::OsStr> = vec![os("req")];
    req.extend(ec.iter().map(|a| os(a)));
    req.extend([
        os("-subj"),
        os("/CN=127.0.0.1"),
        os("-keyout"),
        files.key.as_os_str(),
        os("-out"),
        csr.as_os_str(),
    ]);
    run(&req)?;
    run(&[
        os("x509"),
        os("-req"),
        os("-days"),
        os("2"),
        os("-in"),
        csr.as_os_str(),
        os("-CA"),
        files.ca.as_os_str(),
        os("-CAkey"),
        ca_key.as_os_str(),
        os("-CAcreateserial"),
        os("-extfile"),
        ext.as_os_str(),
        os("-out"),
        files.cert.as_os_str(),
    ])?;
    Ok(files)
}

/// Finds `redis-server`: [`REDIS_SERVER_ENV`] if set, else the first one on `PATH`.
///
/// # Errors
///
/// A `NotFound` error that says how to install it.
pub fn find_redis_server() -> io::Result<PathBuf> {
    if let Some(path) = std::env::var_os(REDIS_SERVER_ENV) {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Ok(path);
        }
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{REDIS_SERVER_ENV} names {}, which is not a file; install redis-server (Debian/Ubuntu: `apt-get install -y redis-server`, macOS: `brew install redis`) or point {REDIS_SERVER_ENV} at it",
                path.display()
            ),
        ));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "redis-server was not found on PATH; install it (Debian/Ubuntu: `apt-get install -y redis-server`, macOS: `brew install redis`) or set {REDIS_SERVER_ENV} to its path"
                ),
            )
        })
}

/// A port that is free now, drawn at random below Linux's ephemeral range (32768 and up) so
/// that it does not collide with the source ports of outgoing connections, and rarely with
/// another test process drawing at the same time.
fn free_port() -> io::Result<u16> {
    let mut last = None;
    for _ in 0..50 {
        let port = rand::random_range(20_000..32_000);
        if ports_in_use().contains(&port) {
            continue;
        }
        match TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))) {
            Ok(_) => return Ok(port),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free port found")))
}

/// The `process_id` of the server answering on `port` once it serves commands, from
/// `INFO server` followed by `PING` (raw RESP: no client needed); `None` when nothing answers
/// or while it is still loading its data (`INFO` answers then, `PING` says `-LOADING`), so
/// that a restarted durable master is not handed to a test before it can be read.
fn ready_server_pid(port: u16, password: &str) -> Option<u32> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(100)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .ok()?;
    stream
        .write_all(format!("AUTH {password}\r\nINFO server\r\nPING\r\n").as_bytes())
        .ok()?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    while reply.len() < 65_536 {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&reply);
        let Some(rest) = text.split("process_id:").nth(1) else {
            continue;
        };
        let Some(end) = rest.find("\r\n") else {
            continue;
        };
        if rest.contains("\r\n-") {
            return None;
        }
        if rest.contains("\r\n+PONG\r\n") {
            return rest[..end].trim().parse().ok();
        }
    }
    None
}
