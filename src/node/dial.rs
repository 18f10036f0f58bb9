//! Making a connection to one master: TCP (with TLS for `rediss://`), the socket's options,
//! and the login (`AUTH`, `SELECT`).

use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, RedisError, RedisResult};
use tokio::net::TcpStream;

use super::Tls;
use super::wire::{Call, Stream, Wire};

/// Connects `wire` to the master `info` names, for at most `timeout`, and logs in: `login`
/// is the call of [`login_commands`], sent on `wire` first. The connection is broken if any
/// of it fails; `timeout` is also how long sent bytes may go unacknowledged before the
/// connection is given up (see [`tcp_options`]).
pub(super) async fn dial(
    wire: Wire,
    login: Option<Call>,
    info: ConnectionInfo,
    tls: Option<Tls>,
    timeout: Duration,
) {
    let connected = tokio::time::timeout(timeout, async {
        wire.attach(stream(&info, tls.as_ref(), timeout).await?);
        if let Some(login) = login {
            for reply in login.await? {
                reply.extract_error()?;
            }
        }
        Ok::<_, RedisError>(())
    })
    .await;
    match connected {
        Ok(Ok(())) => wire.open(),
        Ok(Err(e)) => wire.fail(e),
        Err(_) => wire.fail(std::io::Error::from(std::io::ErrorKind::TimedOut).into()),
    }
}

/// What a new connection sends before anything else: `AUTH` when the URL has a password,
/// `SELECT` when it names a database other than 0.
pub(super) fn login_commands(info: &ConnectionInfo) -> Vec<redis::Cmd> {
    let login = info.redis_settings();
    let mut commands = Vec::new();
    if let Some(password) = login.password() {
        let mut auth = redis::cmd("AUTH");
        if let Some(user) = login.username() {
            auth.arg(user);
        }
        auth.arg(password);
        commands.push(auth);
    }
    if login.db() != 0 {
        let mut select = redis::cmd("SELECT");
        select.arg(login.db());
        commands.push(select);
    }
    commands
}

/// The byte stream to the master: TCP, with TLS for `rediss://`.
async fn stream(
    info: &ConnectionInfo,
    tls: Option<&Tls>,
    stall: Duration,
) -> RedisResult<Box<dyn Stream>> {
    let (host, port, tls) = match (info.addr(), tls) {
        (ConnectionAddr::Tcp(host, port), _) => (host, *port, None),
        (
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure: false,
                ..
            },
            Some(tls),
        ) => (host, *port, Some(tls)),
        (other, _) => {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "unsupported address",
                other.to_string(),
            )));
        }
    };
    let tcp = TcpStream::connect((host.as_str(), port)).await?;
    tcp_options(&tcp, stall)?;
    let Some(tls) = tls else {
        return Ok(Box::new(tcp));
    };
    #[cfg(feature = "tls")]
    return Ok(Box::new(tls.handshake(host, tcp).await?));
    #[cfg(not(feature = "tls"))]
    match *tls {}
}

/// TCP options of every connection to a node: `stall` is the connect timeout, at least 1 s.
///
/// Commands and replies are small writes that someone waits for: Nagle's algorithm would hold
/// one back while an earlier one is unacknowledged.
///
/// A node cut off by the network neither answers nor says so: the commands sent sit in the
/// socket while TCP resends them at ever longer intervals, and after the network comes back the
/// connection can stay silent for seconds more. Commands past their deadline do not close it,
/// and must not: a paused node runs the commands it was sent when it resumes, the release
/// after the grant. `TCP_USER_TIMEOUT` closes it once sent bytes have gone unacknowledged by
/// the node's kernel (which acknowledges for a paused process too) for `stall`, and the next
/// command connects anew; keepalive probes do the same for a connection that only listens.
fn tcp_options(tcp: &TcpStream, stall: Duration) -> std::io::Result<()> {
    tcp.set_nodelay(true)?;
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "fuchsia"))]
    {
        let stall = stall.max(Duration::from_secs(1));
        let socket = redis::io::tcp::socket2::SockRef::from(tcp);
        socket.set_tcp_user_timeout(Some(stall))?;
        socket.set_tcp_keepalive(
            &redis::io::tcp::socket2::TcpKeepalive::new()
                .with_time(stall)
                .with_interval(stall),
        )?;
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "fuchsia")))]
    let _ = stall;
    Ok(())
}
