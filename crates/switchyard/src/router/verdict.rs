//! What a request has come to so far: the answer, a refusal kept aside, the last error, and
//! whether it ran out of time.

use tokio::time::Instant;

use crate::pacing::Permit;
use crate::{ErrorKind, ProviderError, Target};

/// An answer a target gave, with what serving it needs.
pub(super) struct TargetAnswer<O> {
    pub(super) output: O,
    pub(super) target: Target,
    /// The credential index that answered.
    pub(super) credential: usize,
    /// The pacing permit a stream holds until it ends.
    pub(super) permit: Option<Permit>,
    /// When its call was sent.
    pub(super) sent: Instant,
}

/// The request's verdict so far.
pub(super) struct Verdict<O> {
    /// The answer, once an attempt produced one.
    answer: Option<TargetAnswer<O>>,
    /// A refusal redirected to the content-policy chain: served after all if that chain
    /// produces nothing, since it is the provider's real answer. Boxed: rarely set, and the
    /// answer it holds would grow every request's state.
    refusal: Option<Box<TargetAnswer<O>>>,
    /// The latest failure (a skip only when nothing failed), which the request fails with when
    /// nothing answers.
    last_error: Option<ProviderError>,
    /// The request's deadline ended the walk.
    out_of_time: bool,
}

impl<O> Verdict<O> {
    pub(super) fn new() -> Self {
        Self { answer: None, refusal: None, last_error: None, out_of_time: false }
    }

    /// A target answered: the request is served.
    pub(super) fn answered(&mut self, answer: TargetAnswer<O>) {
        self.answer = Some(answer);
    }

    /// A refusal is kept aside while the content-policy chain is tried.
    pub(super) fn keep_refusal(&mut self, refusal: TargetAnswer<O>) {
        self.refusal = Some(Box::new(refusal));
    }

    /// The latest failure, the request's if nothing answers.
    pub(super) fn failed(&mut self, error: ProviderError) {
        self.last_error = Some(error);
    }

    /// A target skipped, never asked: the request's error only when nothing failed before it
    /// (a skip after a timeout would otherwise hide the timeout behind "cannot be written").
    pub(super) fn skipped(&mut self, error: ProviderError) {
        self.last_error.get_or_insert(error);
    }

    /// The request's deadline passed.
    pub(super) fn ran_out_of_time(&mut self) {
        self.out_of_time = true;
    }

    /// Whether the request's deadline ended the walk.
    pub(super) fn out_of_time(&self) -> bool {
        self.out_of_time
    }

    /// The kind of the latest failure.
    pub(super) fn last_kind(&self) -> Option<ErrorKind> {
        self.last_error.as_ref().map(ProviderError::kind)
    }

    pub(super) fn take_answer(&mut self) -> Option<TargetAnswer<O>> {
        self.answer.take()
    }

    pub(super) fn take_refusal(&mut self) -> Option<TargetAnswer<O>> {
        self.refusal.take().map(|refusal| *refusal)
    }

    pub(super) fn take_last_error(&mut self) -> Option<ProviderError> {
        self.last_error.take()
    }
}
