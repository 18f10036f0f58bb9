//! Reading one master for doctor: its `INFO` and persistence settings, its clock and round
//! trip, and what its ACL allows.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};

use super::NodeCheck;
use super::acl::read_acl;
use crate::node::{Info, Node, config_value, is_durable};

/// Reads one master. Everything is best effort: what fails is left empty, with the reason.
pub(super) async fn check(node: &Node, prefix: &str, deadline: Duration) -> NodeCheck {
    let mut out = NodeCheck::unchecked(node.addr());
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(deadline))
        .set_response_timeout(Some(deadline));
    let mut conn = match node
        .redis_client()
        .get_multiplexed_async_connection_with_config(&config)
        .await
    {
        Ok(conn) => conn,
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    };
    if let Err(e) = read_info(&mut conn, &mut out).await {
        out.error = Some(e.to_string());
        return out;
    }
    out.reachable = true;
    if let Err(e) = read_clock(&mut conn, &mut out).await {
        out.reachable = false;
        out.error = Some(e.to_string());
        return out;
    }
    match read_acl(node, &mut conn, prefix).await {
        Ok((user, missing)) => {
            out.acl_user = user;
            out.acl_missing = missing;
        }
        Err(e) => {
            out.reachable = false;
            out.error = Some(e.to_string());
        }
    }
    out
}

/// `INFO` and `CONFIG GET appendfsync`: version, role, run id, persistence, eviction policy.
async fn read_info(
    conn: &mut MultiplexedConnection,
    out: &mut NodeCheck,
) -> redis::RedisResult<()> {
    let mut pipe = redis::pipe();
    // The default sections hold server, replication, persistence and memory alike, and a plain
    // `INFO` is understood by every Redis version.
    pipe.add_command(redis::cmd("INFO"));
    pipe.add_command(
        redis::cmd("CONFIG")
            .arg("GET")
            .arg("appendfsync")
            .to_owned(),
    );
    let replies = conn.send_packed_commands(&pipe, 0, 2).await?;
    // Refused (the ACL check names INFO then): the fields stay unknown.
    let info = Info::from_reply(replies.first());
    let field = |name: &str| info.field(name);
    out.redis_version = field("redis_version");
    out.role = field("role");
    out.run_id = field("run_id");
    out.aof_enabled = field("aof_enabled").map(|v| v == "1");
    out.maxmemory_policy = field("maxmemory_policy");
    out.appendfsync = replies.get(1).and_then(config_value);
    out.durable = is_durable(out.aof_enabled, out.appendfsync.as_deref());
    Ok(())
}

/// A few `TIME` round trips: the shortest gives the round-trip time and the offset estimate
/// with the least uncertainty (half the round trip).
async fn read_clock(
    conn: &mut MultiplexedConnection,
    out: &mut NodeCheck,
) -> redis::RedisResult<()> {
    const SAMPLES: usize = 3;
    let mut best: Option<(Duration, Option<i64>)> = None;
    for _ in 0..SAMPLES {
        let wall = SystemTime::now();
        let started = Instant::now();
        let reply = conn.send_packed_command(&redis::cmd("TIME")).await?;
        let rtt = started.elapsed();
        // Any answer, a refusal included, measures the round trip.
        let offset = master_micros(&reply).and_then(|master| {
            let midpoint = wall.checked_add(rtt / 2)?.duration_since(UNIX_EPOCH).ok()?;
            let local = i64::try_from(midpoint.as_micros()).ok()?;
            master.checked_sub(local)
        });
        if best.is_none_or(|(shortest, _)| rtt < shortest) {
            best = Some((rtt, offset));
        }
    }
    if let Some((rtt, offset)) = best {
        out.rtt = Some(rtt);
        out.clock_offset_micros = offset;
    }
    Ok(())
}

/// Microseconds since the epoch from a `TIME` reply.
fn master_micros(reply: &Value) -> Option<i64> {
    let number = |v: &Value| match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse::<i64>().ok(),
        Value::Int(n) => Some(*n),
        _ => None,
    };
    match reply {
        Value::Array(items) if items.len() == 2 => {
            let secs = number(&items[0])?;
            let micros = number(&items[1])?;
            secs.checked_mul(1_000_000)?.checked_add(micros)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_replies_are_read() {
        let reply = Value::Array(vec![
            Value::BulkString(b"1700000000".to_vec()),
            Value::BulkString(b"123456".to_vec()),
        ]);
        assert_eq!(master_micros(&reply), Some(1_700_000_000_123_456));
        assert_eq!(master_micros(&Value::Nil), None);
    }
}
