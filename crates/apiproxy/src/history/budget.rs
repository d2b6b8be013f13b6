//! The in-flight budget of history reads: how many KiB of page budget all running history reads
//! may hold at once, with the wait and the refusal when it stays taken.

use std::{sync::Arc, time::Duration};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// Why a read was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The read's cancellation fired while it waited.
    Cancelled,
    /// The budget stayed taken for the whole wait.
    Busy,
}

/// The in-flight budget of history reads (`ProxyConfig::history_inflight_bytes`), counted in
/// KiB of page budget: a read takes its page's share before it reads and gives it back when its
/// page is built. Waiters are served in arrival order.
#[derive(Debug)]
pub(crate) struct InflightBudget {
    kib: Arc<Semaphore>,
    total_kib: u32,
}

impl InflightBudget {
    /// A budget of `bytes` (rounded up to whole KiB).
    pub(crate) fn new(bytes: usize) -> InflightBudget {
        let total_kib = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX).max(1);
        InflightBudget { kib: Arc::new(Semaphore::new(total_kib as usize)), total_kib }
    }

    /// Takes the share of one read with a page budget of `page_bytes` (all of the budget if the
    /// page is larger), waiting at most `wait`: then `Busy`. A fired `cancel` is `Cancelled`.
    pub(crate) async fn admit(
        &self,
        page_bytes: usize,
        wait: Duration,
        cancel: &CancellationToken,
    ) -> Result<OwnedSemaphorePermit, Refused> {
        let share = u32::try_from(page_bytes.div_ceil(1024)).unwrap_or(u32::MAX).clamp(1, self.total_kib);
        let acquire = tokio::time::timeout(wait, Arc::clone(&self.kib).acquire_many_owned(share));
        tokio::select! {
            biased;
            () = cancel.cancelled() => Err(Refused::Cancelled),
            acquired = acquire => match acquired {
                Ok(Ok(permit)) => Ok(permit),
                // The semaphore is never closed; a closed one could only mean no read may run.
                Ok(Err(_)) | Err(_) => Err(Refused::Busy),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_inflight_budget_makes_the_excess_wait_then_busy() {
        let budget = InflightBudget::new(8 << 10);
        let cancel = CancellationToken::new();
        let wait = Duration::from_millis(1);
        let first = budget.admit(4 << 10, wait, &cancel).await.expect("half the budget is free");
        let second = budget.admit(4 << 10, wait, &cancel).await.expect("the other half is free");
        assert!(matches!(budget.admit(1, wait, &cancel).await, Err(Refused::Busy)), "nothing is left");
        drop(first);
        // A page larger than the whole budget takes all of it, once it is all free.
        let waiting = budget.admit(1 << 30, Duration::from_secs(3600), &cancel);
        tokio::pin!(waiting);
        tokio::select! {
            biased;
            _ = &mut waiting => panic!("a read that needs the whole budget waits for the half still taken"),
            () = std::future::ready(()) => {}
        }
        drop(second);
        let whole = waiting.await.expect("the whole budget is free again");
        let cancelled = CancellationToken::new();
        cancelled.cancel();
        let admitted = budget.admit(1, Duration::from_secs(3600), &cancelled).await;
        assert!(matches!(admitted, Err(Refused::Cancelled)), "a cancelled wait ends at once");
        drop(whole);
        assert!(budget.admit(8 << 10, wait, &cancel).await.is_ok());
    }
}
