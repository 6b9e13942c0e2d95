//! A lane's link to the fleet: its [`LeaseBook`], the fleet it leases from, and the callers
//! waiting for a grant.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::book::Take;
use super::{FleetPacing, LeaseAsk, LeaseBook, Taken};

fn min_instant(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A lane's link to the fleet: its book, the fleet, and the waiters for a grant.
pub(crate) struct FleetGate {
    fleet: Arc<dyn FleetPacing>,
    key: Arc<str>,
    book: Mutex<LeaseBook>,
    granted: Notify,
    /// The book's degraded share (0 while shared), read by the header gate without the lock.
    share: AtomicUsize,
}

impl FleetGate {
    pub(crate) fn new(fleet: Arc<dyn FleetPacing>, key: Arc<str>, book: LeaseBook) -> Self {
        Self { fleet, key, book: Mutex::new(book), granted: Notify::new(), share: AtomicUsize::new(0) }
    }

    pub(crate) fn book(&self) -> MutexGuard<'_, LeaseBook> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    pub(crate) fn fleet(&self) -> &dyn FleetPacing {
        &*self.fleet
    }

    /// Takes what a call of `tokens` needs at `now`, waiting for grants; fails with the
    /// instant it gave up once `give_up_at` passes.
    pub(crate) async fn take(
        self: &Arc<Self>,
        tokens: f64,
        give_up_at: Option<Instant>,
        now: Instant,
    ) -> Result<Taken, Instant> {
        // The usual case, a slice in hand: no waiting to prepare for.
        if let Ok(taken) = self.try_take(tokens, now) {
            return Ok(taken);
        }
        loop {
            // Listen for grants first, then look again: a grant in between is not lost.
            let listen = self.granted.notified();
            tokio::pin!(listen);
            listen.as_mut().enable();
            let now = Instant::now();
            let wake_at = match self.try_take(tokens, now) {
                Ok(taken) => return Ok(Taken { waited: true, ..taken }),
                Err(at) => at,
            };
            let wake_at = min_instant(wake_at, give_up_at);
            if give_up_at.is_some_and(|at| at <= now) {
                return Err(now);
            }
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        () = &mut listen => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => listen.await,
            }
            if let Some(at) = give_up_at
                && Instant::now() >= at
            {
                return Err(at);
            }
        }
    }

    /// Takes what a call needs now, sending the lease it calls for on its way; or says until
    /// when to wait (`None`: for a grant).
    fn try_take(self: &Arc<Self>, tokens: f64, now: Instant) -> Result<Taken, Option<Instant>> {
        let (shared, replicas) = (self.fleet.shared(), self.fleet.replicas());
        let (take, prefetch) = {
            let mut book = self.book();
            book.follow(shared, replicas, now);
            self.share.store(book.degraded_share().unwrap_or(0), Ordering::Relaxed);
            let take = book.take(tokens, now);
            let prefetch = match &take {
                Take::Got(_) => book.prefetch(now),
                _ => None,
            };
            (take, prefetch)
        };
        match take {
            Take::Got(taken) => {
                if let Some(ask) = prefetch {
                    self.lease(ask);
                }
                Ok(taken)
            }
            Take::Short { ask, retry_at } => {
                if let Some(ask) = ask {
                    self.lease(*ask);
                }
                Err(retry_at)
            }
            Take::Wait(wait) => Err(Some(now + wait)),
        }
    }

    /// The fleet size this lane divides its allowance by while degraded; `None` while shared.
    pub(crate) fn degraded_share(&self) -> Option<usize> {
        Some(self.share.load(Ordering::Relaxed)).filter(|n| *n > 0)
    }

    /// Sends a lease on its way; its grant wakes the waiters.
    fn lease(self: &Arc<Self>, ask: LeaseAsk) {
        let gate = self.clone();
        let call = self.fleet.lease(&self.key, ask);
        let sent = Instant::now();
        tokio::spawn(async move {
            let grant = call.await;
            gate.book().granted(grant, sent, Instant::now());
            gate.granted.notify_waiters();
        });
    }

    /// Wakes the callers waiting for a grant.
    pub(crate) fn wake(&self) {
        self.granted.notify_waiters();
    }
}
