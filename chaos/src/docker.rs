//! Docker and docker compose, through their command-line clients: bring a project up and down,
//! inject faults, and read back container state to confirm them. Also direct Redis probes of
//! the masters (PING, INFO, a sentinel key) from the host, by the containers' addresses.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::AsyncConnectionConfig;
use serde::Deserialize;
use tokio::process::Command;

/// How to run compose: `docker compose` (v2) or `docker-compose` (v1).
#[derive(Debug, Clone)]
pub(crate) struct Docker {
    compose: Vec<String>,
}

/// The output of a command, or why it failed.
type CmdResult = Result<String, String>;

async fn run(program: &str, args: &[String], env: &[(String, String)]) -> CmdResult {
    let mut cmd = Command::new(program);
    cmd.args(args).kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .map_err(|_| format!("`{program} {}` took over 120 s", args.join(" ")))?
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

impl Docker {
    /// Finds a reachable Docker engine and a compose client.
    ///
    /// # Errors
    ///
    /// A plain explanation when there is no `docker`, no engine, or no compose.
    pub(crate) async fn detect() -> Result<Docker, String> {
        run(
            "docker",
            &strings(&["version", "--format", "{{.Server.Version}}"]),
            &[],
        )
        .await
        .map_err(|e| format!("no Docker engine is reachable: {e}"))?;
        if run("docker", &strings(&["compose", "version"]), &[])
            .await
            .is_ok()
        {
            return Ok(Docker {
                compose: strings(&["docker", "compose"]),
            });
        }
        if run("docker-compose", &strings(&["version"]), &[])
            .await
            .is_ok()
        {
            return Ok(Docker {
                compose: strings(&["docker-compose"]),
            });
        }
        Err("Docker is here but compose is not: install the compose plugin (`docker compose`) or docker-compose".to_owned())
    }

    /// The compose client, for reports.
    pub(crate) fn compose_name(&self) -> String {
        self.compose.join(" ")
    }

    /// Runs `docker ARGS`.
    pub(crate) async fn docker(&self, args: &[&str]) -> CmdResult {
        run("docker", &strings(args), &[]).await
    }

    /// Whether an image is present locally.
    pub(crate) async fn has_image(&self, image: &str) -> bool {
        self.docker(&["image", "inspect", "--format", "{{.Id}}", image])
            .await
            .is_ok()
    }

    /// The IPv4 subnets of every Docker network on this engine.
    pub(crate) async fn used_subnets(&self) -> Vec<String> {
        let Ok(ids) = self.docker(&["network", "ls", "-q"]).await else {
            return Vec::new();
        };
        let mut args = vec![
            "network",
            "inspect",
            "--format",
            "{{range .IPAM.Config}}{{.Subnet}} {{end}}",
        ];
        args.extend(ids.split_whitespace());
        self.docker(&args)
            .await
            .map(|out| out.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default()
    }
}

/// The Redis services of the chaos project: five masters and the resource.
pub(crate) const MASTERS: [&str; 5] = ["redis1", "redis2", "redis3", "redis4", "redis5"];
/// The protected resource's service.
pub(crate) const RESOURCE: &str = "resource";

/// One compose project: the root compose file plus `chaos/compose.chaos.yml`, with a unique
/// name and a subnet of its own.
#[derive(Debug, Clone)]
pub(crate) struct Project {
    docker: Docker,
    /// The project's name (`-p`).
    pub(crate) name: String,
    files: Vec<PathBuf>,
    env: Vec<(String, String)>,
    /// Fixed addresses of the services.
    pub(crate) ips: BTreeMap<String, Ipv4Addr>,
    /// The subnet, `a.b.c.0/24`.
    pub(crate) subnet: String,
    /// Container ids by service, once looked up.
    containers: Arc<Mutex<BTreeMap<String, String>>>,
}

/// A container's state as `docker inspect` shows it.
#[derive(Debug, Clone, Default)]
pub(crate) struct ContainerState {
    /// `running`, `paused`, `exited`...
    pub(crate) status: String,
    /// Whether the process runs (a paused container is running).
    pub(crate) running: bool,
    /// Whether it is paused.
    pub(crate) paused: bool,
    /// The exit code, when exited.
    pub(crate) exit_code: i64,
    /// Networks it is attached to, with its address on each.
    pub(crate) networks: BTreeMap<String, String>,
    /// When it was last started.
    pub(crate) started_at: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Inspect {
    state: InspectState,
    network_settings: InspectNetworks,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct InspectState {
    status: String,
    running: bool,
    paused: bool,
    exit_code: i64,
    started_at: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct InspectNetworks {
    networks: Option<BTreeMap<String, InspectNetwork>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct InspectNetwork {
    #[serde(rename = "IPAddress")]
    ip_address: String,
}

impl Project {
    /// A project named `name` on subnet `10.x.y.0/24` (`prefix` = `10.x.y`), with the Redis
    /// image and master arguments given.
    pub(crate) fn new(
        docker: &Docker,
        root: &Path,
        name: &str,
        prefix: [u8; 3],
        redis_image: &str,
        redis_args: &str,
    ) -> Project {
        let [a, b, c] = prefix;
        let subnet = format!("{a}.{b}.{c}.0/24");
        let mut ips = BTreeMap::new();
        for (i, service) in MASTERS.iter().enumerate() {
            let host = u8::try_from(11 + i).unwrap_or(11);
            ips.insert((*service).to_owned(), Ipv4Addr::new(a, b, c, host));
        }
        ips.insert(RESOURCE.to_owned(), Ipv4Addr::new(a, b, c, 20));
        let mut env = vec![
            ("REDIS_IMAGE".to_owned(), redis_image.to_owned()),
            ("REDIS_ARGS".to_owned(), redis_args.to_owned()),
            ("CHAOS_SUBNET".to_owned(), subnet.clone()),
        ];
        for (service, ip) in &ips {
            env.push((
                format!("CHAOS_IP_{}", service.to_uppercase()),
                ip.to_string(),
            ));
        }
        Project {
            docker: docker.clone(),
            name: name.to_owned(),
            files: vec![
                root.join("docker-compose.yml"),
                root.join("chaos/compose.chaos.yml"),
            ],
            env,
            ips,
            subnet,
            containers: Arc::default(),
        }
    }

    /// Runs `compose -p NAME -f ... ARGS`.
    pub(crate) async fn compose(&self, args: &[&str]) -> CmdResult {
        let mut all: Vec<String> = self.docker.compose[1..].to_vec();
        all.push("-p".to_owned());
        all.push(self.name.clone());
        for f in &self.files {
            all.push("-f".to_owned());
            all.push(f.display().to_string());
        }
        all.extend(args.iter().map(|s| (*s).to_owned()));
        run(&self.docker.compose[0], &all, &self.env).await
    }

    /// Starts the masters and the resource, fresh (new volumes: the project name is new).
    pub(crate) async fn up(&self) -> CmdResult {
        let mut args = vec!["up", "-d", "--no-build"];
        args.extend(MASTERS);
        args.push(RESOURCE);
        self.compose(&args).await
    }

    /// Removes everything: containers (paused ones are unpaused first), network, volumes.
    pub(crate) async fn down(&self) -> CmdResult {
        let mut unpause = vec!["unpause"];
        unpause.extend(MASTERS);
        // Fails when nothing is paused; that is fine.
        let _ = self.compose(&unpause).await;
        self.compose(&["down", "-v", "--remove-orphans", "-t", "1"])
            .await
    }

    /// A service's container id. Containers are never recreated during a scenario (faults
    /// stop, start and restart the same container), so ids are looked up once: `compose ps`
    /// is slow enough (a Python start-up with compose v1) to delay confirmations.
    pub(crate) async fn container(&self, service: &str) -> CmdResult {
        if let Some(id) = self
            .containers
            .lock()
            .ok()
            .and_then(|c| c.get(service).cloned())
        {
            return Ok(id);
        }
        let out = self.compose(&["ps", "-q", service]).await?;
        let id = out
            .split_whitespace()
            .next()
            .map(str::to_owned)
            .ok_or_else(|| format!("no container for {service}"))?;
        if let Ok(mut c) = self.containers.lock() {
            c.insert(service.to_owned(), id.clone());
        }
        Ok(id)
    }

    /// A service's container state.
    pub(crate) async fn state(&self, service: &str) -> Result<ContainerState, String> {
        let id = self.container(service).await?;
        let out = self.docker.docker(&["inspect", &id]).await?;
        let mut parsed: Vec<Inspect> =
            serde_json::from_str(&out).map_err(|e| format!("docker inspect: {e}"))?;
        let i = parsed
            .pop()
            .ok_or_else(|| format!("docker inspect {id}: empty"))?;
        Ok(ContainerState {
            status: i.state.status,
            running: i.state.running,
            paused: i.state.paused,
            exit_code: i.state.exit_code,
            started_at: i.state.started_at,
            networks: i
                .network_settings
                .networks
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.ip_address))
                .collect(),
        })
    }

    /// The compose network's full name, as Docker knows it.
    pub(crate) async fn network(&self) -> Result<String, String> {
        let state = self.state(MASTERS[0]).await?;
        state
            .networks
            .keys()
            .find(|n| n.ends_with("redquorum"))
            .cloned()
            .ok_or_else(|| "the compose network is not attached to redis1".to_owned())
    }

    /// `docker ARGS` with this project's engine.
    pub(crate) async fn docker(&self, args: &[&str]) -> CmdResult {
        self.docker.docker(args).await
    }

    /// A service's `redis://` URL.
    pub(crate) fn url(&self, service: &str) -> String {
        let ip = self
            .ips
            .get(service)
            .copied()
            .unwrap_or(Ipv4Addr::UNSPECIFIED);
        format!("redis://{ip}:6379")
    }
}

/// Runs one Redis command against `url` on a fresh connection, within `timeout` overall.
pub(crate) async fn redis_query<T: redis::FromRedisValue>(
    url: &str,
    cmd: &redis::Cmd,
    timeout: Duration,
) -> Result<T, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    let work = async {
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| e.to_string())?;
        cmd.query_async::<T>(&mut conn)
            .await
            .map_err(|e| e.to_string())
    };
    tokio::time::timeout(timeout * 2, work)
        .await
        .map_err(|_| format!("no answer within {} ms", timeout.as_millis() * 2))?
}

/// One field of an `INFO` reply.
pub(crate) fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields_are_found() {
        let info =
            "# Server\r\nrun_id:abc\r\nuptime_in_seconds:12\r\n# Persistence\r\naof_enabled:0\r\n";
        assert_eq!(info_field(info, "run_id").as_deref(), Some("abc"));
        assert_eq!(info_field(info, "aof_enabled").as_deref(), Some("0"));
        assert_eq!(info_field(info, "uptime"), None);
    }

    #[test]
    fn projects_get_fixed_addresses() {
        let docker = Docker {
            compose: vec!["docker-compose".into()],
        };
        let p = Project::new(
            &docker,
            Path::new("/repo"),
            "rqchaos-1",
            [10, 231, 7],
            "img",
            "",
        );
        assert_eq!(p.url("redis3"), "redis://10.231.7.13:6379");
        assert_eq!(p.url(RESOURCE), "redis://10.231.7.20:6379");
        assert!(
            p.env
                .contains(&("CHAOS_IP_REDIS5".into(), "10.231.7.15".into()))
        );
        assert_eq!(p.subnet, "10.231.7.0/24");
    }
}
