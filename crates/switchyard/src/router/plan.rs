//! A request's plan: the targets still to try, the chain they belong to, and whether its one
//! hedge is spent.

use std::collections::VecDeque;

use tokio::time::Instant;

use super::policy::Chain;
use crate::Target;

/// The targets still to try, and which chain they belong to.
pub(super) struct Plan {
    /// Each target, and whether it is forced past its gate.
    queue: VecDeque<(Target, bool)>,
    chain: Chain,
    /// Whether any target of this chain got past the health gate.
    called: bool,
    /// The gated targets of this chain, with when each gate opens.
    gated: Vec<(Target, Instant)>,
    /// Whether the request was hedged (at most once).
    hedged: bool,
}

impl Plan {
    /// The general chain, or only its first target when `first_only`.
    pub(super) fn new(chain: Vec<Target>, first_only: bool) -> Self {
        let mut queue: VecDeque<(Target, bool)> = chain.into_iter().map(|t| (t, false)).collect();
        if first_only {
            queue.truncate(1);
        }
        Self { queue, chain: Chain::General, called: false, gated: Vec::new(), hedged: false }
    }

    /// The next target, and whether it is forced past its gate: when every target of the chain
    /// was gated, a stale verdict must not become an outage, so the one that recovers first is
    /// tried anyway (and the next, when it cannot take the request).
    pub(super) fn next(&mut self) -> Option<(Target, bool)> {
        match self.queue.pop_front() {
            Some(next) => Some(next),
            // The one that recovers first; then, while none of them could take the request
            // either, the next.
            None if !self.called => {
                let soonest = self.gated.iter().enumerate().min_by_key(|(_, (_, until))| *until)?.0;
                Some((self.gated.swap_remove(soonest).0, true))
            }
            None => None,
        }
    }

    /// The chain being walked.
    pub(super) fn chain(&self) -> Chain {
        self.chain
    }

    /// Walks `targets` as `chain` instead of what is left.
    pub(super) fn switch(&mut self, chain: Chain, targets: &[Target]) {
        self.queue = targets.iter().map(|t| (t.clone(), false)).collect();
        self.chain = chain;
        self.called = false;
        self.gated.clear();
    }

    /// A target got past the gate.
    pub(super) fn called(&mut self) {
        self.called = true;
    }

    /// A target was gated until `until`.
    pub(super) fn gated(&mut self, target: &Target, until: Instant) {
        self.gated.push((target.clone(), until));
    }

    /// Whether another target follows this one (pacing may spill over to it).
    pub(super) fn has_more(&self) -> bool {
        !self.queue.is_empty()
    }

    /// How many targets are still to try after the current one.
    pub(super) fn remaining(&self) -> usize {
        self.queue.len()
    }

    /// The next target that is not `not`, without taking it (a hedge's).
    pub(super) fn peek_other(&self, not: &Target) -> Option<Target> {
        self.queue.iter().map(|(target, _)| target).find(|target| *target != not).cloned()
    }

    /// Takes `target` out of what is left (a hedge on it failed: it is done for this request).
    pub(super) fn remove(&mut self, target: &Target) {
        self.queue.retain(|(queued, _)| queued != target);
    }

    /// The request's one hedge was started.
    pub(super) fn hedge_spent(&mut self) {
        self.hedged = true;
    }

    /// Whether the request's one hedge was started.
    pub(super) fn is_hedged(&self) -> bool {
        self.hedged
    }
}
