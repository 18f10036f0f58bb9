//! The yardsticks every lock figure is set against: one Redis round trip, the same command on
//! every master at once, and a wake-up through pub/sub on every master.

use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redquorum_testkit::{CpuMeter, CpuPer, MastersCpu};

use super::percentile;

/// p50 of one unpipelined SET from a single client, in µs.
pub(super) async fn floor(url: &str, rounds: usize) -> Result<f64, redis::RedisError> {
    let mut conn = connections(&[url.to_owned()]).await?.remove(0);
    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds + 200 {
        let started = Instant::now();
        let () = redis::cmd("SET")
            .arg("redquorum-bench:floor")
            .arg(i)
            .query_async(&mut conn)
            .await?;
        if i >= 200 {
            samples.push(started.elapsed());
        }
    }
    Ok(percentile(&mut samples, 0.5))
}

/// Connections to every master, made before anything is timed.
async fn connections(
    urls: &[String],
) -> Result<Vec<redis::aio::MultiplexedConnection>, redis::RedisError> {
    let mut conns = Vec::with_capacity(urls.len());
    for url in urls {
        conns.push(
            redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?,
        );
    }
    Ok(conns)
}

/// p50, in µs, of one unpipelined SET sent to every master at once, until a majority has
/// answered: the least an acquire can take here, with no lock and no script. With `masters`,
/// also what a timed round cost their CPUs and this process's.
pub(super) async fn fan_out_bound(
    urls: &[String],
    rounds: usize,
    masters: Option<&MastersCpu>,
) -> Result<(f64, Option<CpuPer>), redis::RedisError> {
    let conns = connections(urls).await?;
    let majority = urls.len() / 2 + 1;
    let mut samples = Vec::with_capacity(rounds);
    let mut meter = None;
    for i in 0..rounds + 200 {
        if i == 200 {
            meter = masters.map(CpuMeter::start);
        }
        let started = Instant::now();
        let mut replies: FuturesUnordered<_> = conns
            .iter()
            .map(|conn| {
                let mut conn = conn.clone();
                async move {
                    redis::cmd("SET")
                        .arg("redquorum-bench:fan-out")
                        .arg(i)
                        .query_async::<()>(&mut conn)
                        .await
                }
            })
            .collect();
        let mut answered = 0;
        // Every reply is awaited, so that no round overlaps the next; the time is taken at
        // the majority.
        while let Some(reply) = replies.next().await {
            reply?;
            answered += 1;
            if answered == majority && i >= 200 {
                samples.push(started.elapsed());
            }
        }
    }
    let cpu_per_round = meter.and_then(|m| m.per(rounds));
    Ok((percentile(&mut samples, 0.5), cpu_per_round))
}

/// p50, in µs, of a wake-up through every master: after `idle` with nothing to do (as a
/// waiter's client idles through a holder's critical section), one PUBLISH sent to every
/// master at once, until a subscriber on every master has heard a majority of them. This is
/// the least a handoff woken by a release can take here, with no lock and no script.
pub(super) async fn wake_bound(
    urls: &[String],
    idle: Duration,
    rounds: usize,
) -> Result<f64, Box<dyn std::error::Error + Send + Sync>> {
    const CHANNEL: &str = "redquorum-bench:wake";
    let conns = connections(urls).await?;
    let mut streams = Vec::with_capacity(urls.len());
    for url in urls {
        let mut pubsub = redis::Client::open(url.as_str())?
            .get_async_pubsub()
            .await?;
        pubsub.subscribe(CHANNEL).await?;
        streams.push(pubsub.into_on_message());
    }
    let mut heard = futures::stream::select_all(streams);
    let majority = urls.len() / 2 + 1;
    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds + 20 {
        tokio::time::sleep(idle).await;
        let started = Instant::now();
        let publish = futures::future::try_join_all(conns.iter().map(|conn| {
            let mut conn = conn.clone();
            async move {
                redis::cmd("PUBLISH")
                    .arg(CHANNEL)
                    .arg(i)
                    .query_async::<i64>(&mut conn)
                    .await
            }
        }));
        // Messages of earlier rounds still on their way are skipped: each names its round.
        let hear = async {
            let mut count = 0;
            while count < majority {
                let message = heard.next().await.ok_or("a subscription ended")?;
                if message.get_payload::<usize>().ok() == Some(i) {
                    count += 1;
                }
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(started.elapsed())
        };
        let (published, took) =
            tokio::join!(publish, tokio::time::timeout(Duration::from_secs(1), hear));
        published?;
        let took = took.map_err(|_| "a published message was not heard within 1 s")??;
        if i >= 20 {
            samples.push(took);
        }
    }
    Ok(percentile(&mut samples, 0.5))
}
