//! The transport bound: a socket per master, written and read by the calling task itself, with
//! no client library between (no connection task, no channel to it), RESP by hand. Not a
//! client: it knows only the replies that the bare fan-outs' commands and `SCRIPT LOAD` get.

use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One master's socket and the bytes read from it that no reply has used yet.
pub(crate) struct Wire {
    stream: TcpStream,
    unread: Vec<u8>,
}

impl Wire {
    /// Connects to the master of a `redis://[user:password@]host:port` URL, and logs in.
    pub(crate) async fn connect(url: &str) -> Result<Self, String> {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        let info = client.get_connection_info();
        let redis::ConnectionAddr::Tcp(host, port) = info.addr() else {
            return Err(format!("{url}: the transport bound speaks plain TCP only"));
        };
        let stream = TcpStream::connect((host.as_str(), *port))
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let mut wire = Wire {
            stream,
            unread: Vec::new(),
        };
        let settings = info.redis_settings();
        if let Some(password) = settings.password() {
            let user = settings.username().unwrap_or("default");
            wire.call(&[b"AUTH", user.as_bytes(), password.as_bytes()])
                .await
                .map_err(|e| format!("{url}: {e}"))?;
        }
        Ok(wire)
    }

    /// Sends one command and reads its reply: a status or integer line, or a bulk string.
    pub(crate) async fn call(&mut self, args: &[&[u8]]) -> io::Result<Vec<u8>> {
        self.send(args).await?;
        let line = self.line().await?;
        self.item(line).await
    }

    /// Sends one command whose reply is an array of status, integer or bulk string items (a
    /// script's table), and reads the items.
    pub(crate) async fn call_for_array(&mut self, args: &[&[u8]]) -> io::Result<Vec<Vec<u8>>> {
        self.send(args).await?;
        let line = self.line().await?;
        let Some(count) = line
            .strip_prefix(b"*")
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(|n| n.parse::<usize>().ok())
        else {
            return Err(bad(&String::from_utf8_lossy(&line)));
        };
        let mut items = Vec::with_capacity(count);
        for _ in 0..count {
            let line = self.line().await?;
            items.push(self.item(line).await?);
        }
        Ok(items)
    }

    async fn send(&mut self, args: &[&[u8]]) -> io::Result<()> {
        let mut request = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            request.extend_from_slice(arg);
            request.extend_from_slice(b"\r\n");
        }
        self.stream.write_all(&request).await
    }

    /// One reply item, from its first line.
    async fn item(&mut self, line: Vec<u8>) -> io::Result<Vec<u8>> {
        match line.first() {
            Some(b'+' | b':') => Ok(line[1..].to_vec()),
            // Nil.
            Some(b'$') if line == b"$-1" => Ok(Vec::new()),
            Some(b'$') => {
                let len: usize = std::str::from_utf8(&line[1..])
                    .ok()
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| bad("a bulk string with no length"))?;
                self.fill(len + 2).await?;
                let body: Vec<u8> = self.unread.drain(..len + 2).take(len).collect();
                Ok(body)
            }
            _ => Err(bad(&String::from_utf8_lossy(&line))),
        }
    }

    /// The next reply line, without its CRLF.
    async fn line(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if let Some(end) = self.unread.windows(2).position(|w| w == b"\r\n") {
                let line = self.unread.drain(..end + 2).take(end).collect();
                return Ok(line);
            }
            self.read_more().await?;
        }
    }

    /// Reads until at least `len` bytes are unread.
    async fn fill(&mut self, len: usize) -> io::Result<()> {
        while self.unread.len() < len {
            self.read_more().await?;
        }
        Ok(())
    }

    async fn read_more(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 1024];
        let n = self.stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.unread.extend_from_slice(&chunk[..n]);
        Ok(())
    }
}

fn bad(reply: &str) -> io::Error {
    io::Error::other(format!("unexpected reply: {reply}"))
}
