//! Making a connection to one master: TCP (with TLS for `rediss://`), the socket's options,
//! and the login (`AUTH`, `SELECT`).

use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, RedisError, RedisResult};
use tokio::net::TcpStream;

use super::Tls;
use super::wire::{Call, Stream, Wire};

/// Connects `wire` to the master `info` names, with `info`'s TCP options, for at most
/// `timeout`, and logs in: `login` is the call of [`login_commands`], sent on `wire` first.
/// When `identify_at` is given, the login's reply at that place is an `INFO server`, whose
/// `run_id` is booked as the connection's identity before it opens (a master that refuses
/// `INFO` leaves it unknown, and grants heard on the connection count only where votes are not
/// verified). The connection is broken if anything else of it fails.
pub(super) async fn dial(
    wire: Wire,
    login: Option<Call>,
    identify_at: Option<usize>,
    info: ConnectionInfo,
    tls: Option<Tls>,
    timeout: Duration,
) {
    let connected = tokio::time::timeout(timeout, async {
        wire.attach(stream(&info, tls.as_ref()).await?);
        if let Some(login) = login {
            let replies = login.await?;
            if let Some(at) = identify_at
                && let Some(run_id) = super::Info::from_reply(replies.get(at)).field("run_id")
            {
                wire.identify(&run_id);
            }
            for (i, reply) in replies.into_iter().enumerate() {
                if Some(i) != identify_at {
                    reply.extract_error()?;
                }
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
async fn stream(info: &ConnectionInfo, tls: Option<&Tls>) -> RedisResult<Box<dyn Stream>> {
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
    tcp_options(&tcp, info.tcp_settings())?;
    let Some(tls) = tls else {
        return Ok(Box::new(tcp));
    };
    #[cfg(feature = "tls")]
    return Ok(Box::new(tls.handshake(host, tcp).await?));
    #[cfg(not(feature = "tls"))]
    match *tls {}
}

/// Sets the node's TCP options (see [`tcp_settings`](super::tcp_settings)) on `tcp`.
fn tcp_options(tcp: &TcpStream, settings: &redis::io::tcp::TcpSettings) -> std::io::Result<()> {
    tcp.set_nodelay(settings.nodelay())?;
    let socket = redis::io::tcp::socket2::SockRef::from(tcp);
    if let Some(keepalive) = settings.keepalive() {
        socket.set_tcp_keepalive(keepalive)?;
    }
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "fuchsia"))]
    if let Some(stall) = settings.user_timeout() {
        socket.set_tcp_user_timeout(Some(stall))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_nodes_tcp_options_are_set_on_its_sockets() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        tcp_options(&tcp, &super::super::tcp_settings(Duration::from_secs(2))).unwrap();
        assert!(tcp.nodelay().unwrap());
        #[cfg(target_os = "linux")]
        {
            let socket = redis::io::tcp::socket2::SockRef::from(&tcp);
            assert_eq!(
                socket.tcp_user_timeout().unwrap(),
                Some(Duration::from_secs(2))
            );
            assert!(socket.keepalive().unwrap());
            assert_eq!(socket.tcp_keepalive_time().unwrap(), Duration::from_secs(2));
        }
    }
}
