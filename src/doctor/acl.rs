//! Doctor's check of the ACL: which of the commands, keys and channels the library needs the
//! client's user is denied.

use redis::aio::MultiplexedConnection;
use redis::{Cmd, Value};

use crate::node::Node;

/// The commands the library sends, with harmless arguments on a scratch key and channel.
/// Ordered so that a key some command creates gets a TTL (`PEXPIRE`) and is deleted (`DEL`)
/// when those are allowed; `SET` goes first with a TTL, so that the others find a string and
/// create nothing.
fn needed(key: &str, channel: &str) -> Vec<(&'static str, Cmd)> {
    let cmd = |name: &'static str, args: &[&str]| {
        let mut c = redis::cmd(name);
        for a in args {
            c.arg(*a);
        }
        (name, c)
    };
    // A SHA1 no script has: EVALSHA answers NOSCRIPT when it is allowed.
    let absent_sha = "0000000000000000000000000000000000000000";
    vec![
        cmd("SET", &[key, "doctor", "PX", "60000"]),
        cmd("GET", &[key]),
        cmd("MGET", &[key, key]),
        cmd("EXISTS", &[key]),
        cmd("PTTL", &[key]),
        cmd("ZADD", &[key, "0", "doctor"]),
        cmd("ZRANGE", &[key, "0", "0"]),
        cmd("ZREM", &[key, "doctor"]),
        // The read-write lock's and the semaphore's holders.
        cmd("ZSCORE", &[key, "doctor"]),
        cmd("ZCOUNT", &[key, "0", "+inf"]),
        cmd("ZRANGEBYSCORE", &[key, "0", "+inf"]),
        cmd("ZREMRANGEBYSCORE", &[key, "0", "0"]),
        cmd("HSET", &[key, "doctor", "1"]),
        cmd("HGET", &[key, "doctor"]),
        cmd("HDEL", &[key, "doctor"]),
        // A reentrant lock's holds.
        cmd("HLEN", &[key]),
        cmd("HEXISTS", &[key, "doctor"]),
        cmd("PEXPIRE", &[key, "60000"]),
        cmd("TIME", &[]),
        cmd("INFO", &["server"]),
        cmd("PUBLISH", &[channel, "doctor"]),
        cmd("EVAL", &["return 1", "1", key]),
        cmd("EVALSHA", &[absent_sha, "1", key]),
        cmd("DEL", &[key]),
    ]
}

/// The user, and what the ACL denies of what the library needs.
pub(super) async fn read_acl(
    node: &Node,
    conn: &mut MultiplexedConnection,
    prefix: &str,
) -> redis::RedisResult<(Option<String>, Vec<String>)> {
    let scratch = format!("{prefix}doctor:{:016x}", rand::random::<u64>());
    // The wake channels are `{prefix}wake:<client id>`.
    let channel = format!("{prefix}wake:doctor-{:016x}", rand::random::<u64>());
    let mut commands = needed(&scratch, &channel);
    let mut missing = Missing::new(prefix);

    let user = match conn
        .send_packed_command(redis::cmd("ACL").arg("WHOAMI"))
        .await?
    {
        Value::BulkString(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        Value::SimpleString(s) => Some(s),
        _ => None,
    };
    if let Some(user) = &user {
        commands.push((
            "SUBSCRIBE",
            redis::cmd("SUBSCRIBE").arg(&channel).to_owned(),
        ));
        let mut pipe = redis::pipe();
        for (_, c) in &commands {
            let mut dry = redis::cmd("ACL");
            dry.arg("DRYRUN").arg(user);
            for arg in c.args_iter() {
                if let redis::Arg::Simple(bytes) = arg {
                    dry.arg(bytes);
                }
            }
            pipe.add_command(dry);
        }
        let replies = conn.send_packed_commands(&pipe, 0, commands.len()).await?;
        // An error (rather than a verdict) means DRYRUN itself is refused or unknown (Redis
        // before 7): fall back on running the commands.
        if replies.iter().all(|r| !matches!(r, Value::ServerError(_))) {
            for ((name, _), reply) in commands.iter().zip(&replies) {
                let verdict = match reply {
                    Value::Okay => continue,
                    Value::SimpleString(s) => s.clone(),
                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    other => format!("{other:?}"),
                };
                if verdict != "OK" {
                    missing.denied(name, &verdict);
                }
            }
            return Ok((Some(user.clone()), missing.into_list()));
        }
        commands.pop();
    }

    let mut pipe = redis::pipe();
    for (_, c) in &commands {
        pipe.add_command(c.clone());
    }
    let replies = conn.send_packed_commands(&pipe, 0, commands.len()).await?;
    for ((name, _), reply) in commands.iter().zip(&replies) {
        if let Value::ServerError(e) = reply {
            if e.code() == "NOPERM" {
                missing.denied(name, e.details().unwrap_or_default());
            }
        }
    }
    // SUBSCRIBE puts a connection in subscriber mode: it gets one of its own.
    let mut pubsub = node.redis_client().get_async_pubsub().await?;
    if let Err(e) = pubsub.subscribe(&channel).await {
        if e.code() == Some("NOPERM") {
            missing.denied("SUBSCRIBE", e.detail().unwrap_or_default());
        }
    }
    // WHOAMI refused: the user is the URL's, or `default`.
    let user = user.or_else(|| {
        let info = node.redis_client().get_connection_info();
        Some(
            info.redis_settings()
                .username()
                .unwrap_or("default")
                .to_owned(),
        )
    });
    Ok((user, missing.into_list()))
}

/// What the ACL denies, each thing once, in the order found.
struct Missing {
    keys: String,
    channels: String,
    list: Vec<String>,
}

impl Missing {
    fn new(prefix: &str) -> Self {
        Missing {
            keys: format!("~{prefix}*"),
            channels: format!("&{prefix}*"),
            list: Vec::new(),
        }
    }

    /// Books a refusal of `command` with the server's reason: the command itself, or access
    /// to the keys or channels under the prefix.
    fn denied(&mut self, command: &str, reason: &str) {
        let reason = reason.to_ascii_lowercase();
        let what = if reason.contains("channel") {
            self.channels.clone()
        } else if reason.contains("key") {
            self.keys.clone()
        } else {
            command.to_owned()
        };
        if !self.list.contains(&what) {
            self.list.push(what);
        }
    }

    fn into_list(self) -> Vec<String> {
        self.list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_name_the_command_or_the_access() {
        let mut m = Missing::new("rq:");
        m.denied(
            "EVALSHA",
            "this user has no permissions to run the 'evalsha' command",
        );
        m.denied(
            "GET",
            "this user has no permissions to access one of the keys used as arguments",
        );
        m.denied(
            "SET",
            "This user has no permissions to access the 'rq:doctor:1' key",
        );
        m.denied(
            "PUBLISH",
            "This user has no permissions to access the 'rq:wake:x' channel",
        );
        assert_eq!(m.into_list(), ["EVALSHA", "~rq:*", "&rq:*"]);
    }
}
