//! The load loop: critical section after critical section of the kind the runner's mix asks
//! for, with jitter, until told to stop or out of bounds.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::command::{LoadParams, LockSpec, Mix};
use super::operations::{MARGIN, Worker, counter_of};
use crate::rng::SplitMix;

/// How long a nested reentrant acquire may wait: the owner holds the lock already, so it is
/// granted at once unless the masters cannot be reached.
const NESTED_WAIT_MS: u64 = 200;

impl Worker {
    /// Runs the loop; returns how many sections it tried.
    pub(super) async fn load(&mut self, p: &LoadParams) -> Result<u64, String> {
        let mut rng = SplitMix::new(p.seed ^ u64::from(self.id).wrapping_mul(0x9E37_79B9));
        let until = self.clock.now() + p.max_ms * 1_000_000;
        let mut n = 0;
        while n < p.max_iterations && !self.stop.load(Ordering::SeqCst) && self.clock.now() < until
        {
            n += 1;
            match &p.mix {
                Mix::Mutex => self.writer(p, &mut rng, &LockSpec::Mutex).await?,
                Mix::ReadWrite { write_percent } => {
                    if rng.range(1, 100) <= *write_percent {
                        self.writer(p, &mut rng, &LockSpec::Write).await?;
                    } else {
                        self.reader(p, &mut rng, &LockSpec::Read).await?;
                    }
                }
                Mix::Semaphore { permits } => {
                    let spec = LockSpec::Semaphore { permits: *permits };
                    self.reader(p, &mut rng, &spec).await?;
                }
                Mix::Reentrant {
                    depth,
                    mutex_percent,
                } => {
                    if rng.range(1, 100) <= *mutex_percent {
                        self.writer(p, &mut rng, &LockSpec::Mutex).await?;
                    } else {
                        self.nested(p, &mut rng, *depth).await?;
                    }
                }
                Mix::Multi { names, min, max } => {
                    let count = usize::try_from(rng.range(*min, *max)).unwrap_or(1);
                    let picked: Vec<String> = rng
                        .permutation(names.len())
                        .into_iter()
                        .take(count.max(1))
                        .map(|i| names[i].clone())
                        .collect();
                    self.multi(p, &mut rng, picked).await?;
                }
            }
            let think = rng.range(p.think_ms.0, p.think_ms.1);
            tokio::time::sleep(Duration::from_millis(think)).await;
        }
        Ok(n)
    }

    /// Whether the current section has time left for one more step.
    fn has_time(&self) -> bool {
        self.remaining() > MARGIN
    }

    /// Sometimes extends the current section; returns whether it did.
    async fn maybe_extend(&mut self, p: &LoadParams, rng: &mut SplitMix) -> Result<bool, String> {
        Ok(rng.range(1, 100) <= p.extend_percent
            && self.has_time()
            && self.extend(p.ttl_ms).await?)
    }

    async fn hold(&self, p: &LoadParams, rng: &mut SplitMix) {
        let hold = rng.range(p.hold_ms.0, p.hold_ms.1);
        tokio::time::sleep(Duration::from_millis(hold)).await;
    }

    /// An exclusive section: read the counter, work, write it plus one; sometimes extend and do
    /// it again; release.
    async fn writer(
        &mut self,
        p: &LoadParams,
        rng: &mut SplitMix,
        spec: &LockSpec,
    ) -> Result<(), String> {
        if !self.acquire(p.ttl_ms, p.wait_ms, spec).await? {
            return Ok(());
        }
        if self.read().await? {
            self.hold(p, rng).await;
            self.write(0).await?;
        }
        if self.maybe_extend(p, rng).await? && self.read().await? {
            self.write(0).await?;
        }
        self.release().await?;
        Ok(())
    }

    /// A shared section (a reader, a semaphore permit): read the counter and work; sometimes
    /// extend and read again; release. Sharers do not write.
    async fn reader(
        &mut self,
        p: &LoadParams,
        rng: &mut SplitMix,
        spec: &LockSpec,
    ) -> Result<(), String> {
        if !self.acquire(p.ttl_ms, p.wait_ms, spec).await? {
            return Ok(());
        }
        if self.read().await? {
            self.hold(p, rng).await;
        }
        if self.maybe_extend(p, rng).await? {
            self.read().await?;
        }
        self.release().await?;
        Ok(())
    }

    /// A reentrant section held `depth` times: a write under the first hold, then each nested
    /// hold taken (by the same owner), written under, and released innermost first.
    async fn nested(
        &mut self,
        p: &LoadParams,
        rng: &mut SplitMix,
        depth: u32,
    ) -> Result<(), String> {
        if !self
            .acquire(p.ttl_ms, p.wait_ms, &LockSpec::Reentrant)
            .await?
        {
            return Ok(());
        }
        if self.read().await? {
            self.hold(p, rng).await;
            self.write(0).await?;
        }
        let mut inner = 0;
        while inner + 1 < depth
            && self.has_time()
            && self
                .enter(p.ttl_ms, NESTED_WAIT_MS, &LockSpec::Reentrant)
                .await?
        {
            inner += 1;
            if self.read().await? {
                self.write(0).await?;
            }
        }
        for _ in 0..inner {
            self.release().await?;
        }
        if self.maybe_extend(p, rng).await? && self.read().await? {
            self.write(0).await?;
        }
        self.release().await?;
        Ok(())
    }

    /// A multi-lock section over `names`: each name's own counter read and written plus one,
    /// fenced with that name's token; release all.
    async fn multi(
        &mut self,
        p: &LoadParams,
        rng: &mut SplitMix,
        names: Vec<String>,
    ) -> Result<(), String> {
        let spec = LockSpec::Multi {
            names: names.clone(),
        };
        if !self.acquire(p.ttl_ms, p.wait_ms, &spec).await? {
            return Ok(());
        }
        for (i, name) in names.iter().enumerate() {
            if !self.has_time() {
                break;
            }
            if self.read_key(&counter_of(name), Some(name)).await? {
                if i == 0 {
                    self.hold(p, rng).await;
                }
                self.write(0).await?;
            }
        }
        if self.maybe_extend(p, rng).await?
            && let Some(name) = names.first()
            && self.read_key(&counter_of(name), Some(name)).await?
        {
            self.write(0).await?;
        }
        self.release().await?;
        Ok(())
    }
}
