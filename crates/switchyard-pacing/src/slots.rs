//! A lane's concurrency slots, kept by the lanes that follow it when a provider's limits
//! change: the calls in flight then count against the new bound, and callers queued for a slot
//! get one as soon as the new bound has room.
//!
//! Every lane has slots, a lane without `max_concurrent` [`UNBOUNDED`] many, so that a bound
//! set later counts the calls already in flight too.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};

/// The slots of a lane without `max_concurrent`: more calls than one replica ever has.
const UNBOUNDED: usize = 1 << 20;

/// A fair semaphore of slots with a bound that can change while slots are held.
pub(crate) struct Slots {
    semaphore: Arc<Semaphore>,
    sizes: Mutex<Sizes>,
    /// Calls dispatched and not yet ended, whichever lane they went through.
    in_flight: AtomicU32,
}

struct Sizes {
    /// `max_concurrent`, or [`UNBOUNDED`].
    bound: usize,
    /// Slots a lowered bound still takes back, from calls holding them as they end.
    owed: usize,
}

/// A slot held: given back when dropped (kept back while a lowered bound is owed slots).
pub(crate) struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    slots: Arc<Slots>,
}

impl Slots {
    pub(crate) fn new(max_concurrent: Option<u32>) -> Arc<Self> {
        let bound = bound_of(max_concurrent);
        Arc::new(Self {
            semaphore: Arc::new(Semaphore::new(bound)),
            sizes: Mutex::new(Sizes { bound, owed: 0 }),
            in_flight: AtomicU32::new(0),
        })
    }

    fn sizes(&self) -> MutexGuard<'_, Sizes> {
        self.sizes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bounds the slots by `max_concurrent` from now on: a raised bound's room goes to the
    /// callers waiting first; a lowered one takes back free slots now and held ones as their
    /// calls end.
    pub(crate) fn rebound(&self, max_concurrent: Option<u32>) {
        let mut sizes = self.sizes();
        let to = bound_of(max_concurrent);
        let from = std::mem::replace(&mut sizes.bound, to);
        if to >= from {
            let more = to - from;
            let paid = more.min(sizes.owed);
            sizes.owed -= paid;
            self.semaphore.add_permits(more - paid);
        } else {
            let fewer = from - to;
            let taken = self.semaphore.forget_permits(fewer);
            sizes.owed += fewer - taken;
        }
    }

    /// A free slot, if there is one now.
    pub(crate) fn try_take(self: &Arc<Self>) -> Option<Slot> {
        let permit = self.semaphore.clone().try_acquire_owned().ok()?;
        Some(Slot { permit: Some(permit), slots: self.clone() })
    }

    /// The next slot, in arrival order.
    pub(crate) async fn take(self: &Arc<Self>) -> Result<Slot, AcquireError> {
        let permit = self.semaphore.clone().acquire_owned().await?;
        Ok(Slot { permit: Some(permit), slots: self.clone() })
    }

    /// The bound, when there is one.
    pub(crate) fn bound(&self) -> Option<u32> {
        let bound = self.sizes().bound;
        (bound != UNBOUNDED).then(|| u32::try_from(bound).unwrap_or(u32::MAX))
    }

    pub(crate) fn dispatched(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn ended(&self) {
        // Never below zero: each end follows its own dispatch.
        let _ = self.in_flight.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else { return };
        let mut sizes = self.slots.sizes();
        if sizes.owed > 0 {
            sizes.owed -= 1;
            permit.forget();
        }
    }
}

fn bound_of(max_concurrent: Option<u32>) -> usize {
    max_concurrent.map_or(UNBOUNDED, |n| n.max(1) as usize)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_lowered_bound_takes_back_held_slots_as_they_are_given_back() {
        let slots = Slots::new(Some(2));
        let (a, b) = (slots.try_take().unwrap(), slots.try_take().unwrap());
        slots.rebound(Some(1));
        drop(a);
        assert!(slots.try_take().is_none(), "two held, bound one: the first given back is taken back");
        drop(b);
        let c = slots.try_take().expect("one free under the new bound");
        assert!(slots.try_take().is_none());
        drop(c);
    }

    #[test]
    fn a_raised_bound_pays_what_is_owed_first_and_frees_the_rest() {
        let slots = Slots::new(Some(3));
        let held: Vec<Slot> = (0..3).map(|_| slots.try_take().unwrap()).collect();
        slots.rebound(Some(1));
        slots.rebound(Some(4));
        // Three held of four: one free.
        let d = slots.try_take().expect("room for a fourth");
        assert!(slots.try_take().is_none());
        drop((held, d));
        assert_eq!(slots.semaphore.available_permits(), 4);
    }

    #[test]
    fn a_bound_set_where_there_was_none_counts_the_calls_already_holding_slots() {
        let slots = Slots::new(None);
        let held: Vec<Slot> = (0..2).map(|_| slots.try_take().unwrap()).collect();
        slots.rebound(Some(2));
        assert!(slots.try_take().is_none(), "two calls in flight fill a bound of two");
        assert_eq!(slots.bound(), Some(2));
        drop(held);
        assert_eq!(slots.semaphore.available_permits(), 2);
        slots.rebound(None);
        assert_eq!(slots.bound(), None);
    }
}
