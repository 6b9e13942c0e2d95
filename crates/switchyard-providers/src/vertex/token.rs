//! The access token a Vertex provider sends, cached: fetched once for every call until it is
//! due, refreshed before it expires, one refresh at a time.
//!
//! A token is due for refresh a quarter of its lifetime before it expires, and never more than
//! [`MAX_MARGIN`] before (Google's tokens live an hour: refreshed four minutes early, as
//! Google's own libraries do). While one call refreshes a token that is due but still valid,
//! the other calls go on with it and do not wait; only when there is no valid token do they
//! wait, for that one refresh. A refresh that fails while the token in hand is valid keeps it
//! and tries again [`RETRY_AFTER`] later (never on every call).

use std::sync::Mutex;
use std::time::Duration;

use switchyard::credential::Secret;
use switchyard::provider::BoxFuture;
use tokio::time::Instant;

use super::auth::AuthError;

/// The most a token is refreshed before it expires.
pub(crate) const MAX_MARGIN: Duration = Duration::from_secs(240);

/// How long after a failed refresh the next is tried, while the token in hand is still valid.
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(5);

/// The longest a token fetch is waited for: a token endpoint that does not answer is a failed
/// fetch, said as such, rather than a silence every call waiting on it blames on the model.
pub(crate) const FETCH_LIMIT: Duration = Duration::from_secs(10);

/// A token as its source gave it: the secret, and how long it lives from now.
pub(crate) struct FreshToken {
    pub token: Secret,
    pub lifetime: Duration,
}

/// Where tokens come from: one exchange with a token endpoint per call.
pub(crate) trait FetchToken: Send + Sync {
    /// A new token (never one of its own cache).
    fn fetch(&self) -> BoxFuture<'_, Result<FreshToken, AuthError>>;
}

/// The token in hand.
#[derive(Clone)]
struct Held {
    token: Secret,
    /// When the next call refreshes it.
    refresh_at: Instant,
    /// When it stops being sent.
    expires_at: Instant,
}

/// The cache in front of a [`FetchToken`].
pub(crate) struct TokenCache<S> {
    source: S,
    held: Mutex<Option<Held>>,
    /// Held by the one call refreshing.
    refreshing: tokio::sync::Mutex<()>,
    /// The last fetch that failed with no valid token in hand, and when: the calls that waited
    /// while it ran fail with it rather than each waiting on a fetch of its own.
    failed: Mutex<Option<(Instant, AuthError)>>,
}

impl<S: FetchToken> TokenCache<S> {
    pub(crate) fn new(source: S) -> Self {
        Self {
            source,
            held: Mutex::new(None),
            refreshing: tokio::sync::Mutex::new(()),
            failed: Mutex::new(None),
        }
    }

    /// The source behind the cache.
    pub(crate) fn source(&self) -> &S {
        &self.source
    }

    /// A valid token: the one in hand until it is due, else a fresh one.
    pub(crate) async fn token(&self) -> Result<Secret, AuthError> {
        let now = Instant::now();
        let arrived = now;
        let held = self.held();
        let valid = held.filter(|held| now < held.expires_at);
        if let Some(held) = &valid
            && now < held.refresh_at
        {
            return Ok(held.token.clone());
        }
        let _refreshing = match (self.refreshing.try_lock(), &valid) {
            (Ok(guard), _) => guard,
            // Another call is refreshing; the token in hand still serves.
            (Err(_), Some(held)) => return Ok(held.token.clone()),
            (Err(_), None) => self.refreshing.lock().await,
        };
        // The call that refreshed before this one got the lock may have left a fresh token,
        // or failed a moment ago with none in hand: that failure is this call's too.
        let now = Instant::now();
        if let Some(held) = self.held().filter(|held| now < held.refresh_at) {
            return Ok(held.token.clone());
        }
        let recent = self.failures().as_ref().filter(|(at, _)| *at > arrived).map(|(_, e)| e.clone());
        if let (Some(error), None) = (recent, self.held().filter(|held| now < held.expires_at)) {
            return Err(error);
        }
        let fetched = tokio::time::timeout(FETCH_LIMIT, self.source.fetch()).await.unwrap_or_else(|_| {
            let detail = format!("the token endpoint did not answer within {}s", FETCH_LIMIT.as_secs());
            Err(AuthError::new(switchyard::ErrorKind::Timeout, detail))
        });
        match fetched {
            Ok(fresh) => Ok(self.keep(fresh)),
            Err(error) => match self.held().filter(|held| Instant::now() < held.expires_at) {
                Some(held) => {
                    tracing::warn!(error = %error, "refreshing the Google access token failed; the current one is used until it is due again");
                    self.retry_later(&held);
                    Ok(held.token)
                }
                None => {
                    *self.failures() = Some((Instant::now(), error.clone()));
                    Err(error)
                }
            },
        }
    }

    /// Forgets the token in hand (the upstream refused it): the next call fetches one.
    pub(crate) fn forget(&self) {
        *self.lock() = None;
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, Option<(Instant, AuthError)>> {
        self.failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn held(&self) -> Option<Held> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Held>> {
        // A panic while holding this lock cannot leave the option half written.
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps `fresh` and returns its token.
    fn keep(&self, fresh: FreshToken) -> Secret {
        let now = Instant::now();
        let margin = (fresh.lifetime / 4).min(MAX_MARGIN);
        let held = Held {
            token: fresh.token.clone(),
            refresh_at: now + (fresh.lifetime - margin),
            expires_at: now + fresh.lifetime,
        };
        *self.lock() = Some(held);
        fresh.token
    }

    /// Puts the next refresh of `held` [`RETRY_AFTER`] from now (not past its expiry).
    fn retry_later(&self, held: &Held) {
        let mut slot = self.lock();
        if let Some(current) = slot.as_mut().filter(|current| current.token == held.token) {
            current.refresh_at = (Instant::now() + RETRY_AFTER).min(current.expires_at);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use switchyard::ErrorKind;
    use tokio::sync::Semaphore;

    use super::*;

    /// Tokens `t1`, `t2`, ... of `lifetime`, each fetch waiting for a permit of `gate` when
    /// one is set; fetches listed in `fail` (1-based) fail.
    struct Counting {
        fetched: AtomicU32,
        lifetime: Duration,
        gate: Option<Arc<Semaphore>>,
        fail: Vec<u32>,
    }

    impl Counting {
        fn new(lifetime: Duration) -> Self {
            Self { fetched: AtomicU32::new(0), lifetime, gate: None, fail: Vec::new() }
        }

        fn fetched(&self) -> u32 {
            self.fetched.load(Ordering::SeqCst)
        }
    }

    impl FetchToken for Counting {
        fn fetch(&self) -> BoxFuture<'_, Result<FreshToken, AuthError>> {
            Box::pin(async move {
                let n = self.fetched.fetch_add(1, Ordering::SeqCst) + 1;
                if let Some(gate) = &self.gate {
                    gate.acquire().await.unwrap().forget();
                }
                if self.fail.contains(&n) {
                    return Err(AuthError::new(ErrorKind::Transport, "token endpoint down"));
                }
                Ok(FreshToken { token: Secret::new(format!("t{n}")), lifetime: self.lifetime })
            })
        }
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[tokio::test(start_paused = true)]
    async fn one_token_serves_every_call_until_it_is_due() {
        let cache = TokenCache::new(Counting::new(HOUR));
        for _ in 0..50 {
            assert_eq!(cache.token().await.unwrap().expose(), "t1");
        }
        tokio::time::advance(HOUR - MAX_MARGIN - Duration::from_millis(1)).await;
        assert_eq!(cache.token().await.unwrap().expose(), "t1");
        assert_eq!(cache.source().fetched(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_is_refreshed_before_it_expires() {
        let cache = TokenCache::new(Counting::new(HOUR));
        cache.token().await.unwrap();
        // Four minutes before the hour is up: a new token, while the old one still works.
        tokio::time::advance(HOUR - MAX_MARGIN).await;
        assert_eq!(cache.token().await.unwrap().expose(), "t2");
        assert_eq!(cache.source().fetched(), 2);
        // A short-lived token is refreshed a quarter of its life early.
        let short = TokenCache::new(Counting::new(Duration::from_secs(8)));
        short.token().await.unwrap();
        tokio::time::advance(Duration::from_millis(5999)).await;
        assert_eq!(short.token().await.unwrap().expose(), "t1");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(short.token().await.unwrap().expose(), "t2");
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_calls_without_a_token_wait_for_one_fetch() {
        let gate = Arc::new(Semaphore::new(0));
        let source = Counting { gate: Some(gate.clone()), ..Counting::new(HOUR) };
        let cache = Arc::new(TokenCache::new(source));
        let calls: Vec<_> = (0..20)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move { cache.token().await.unwrap().expose().to_owned() })
            })
            .collect();
        tokio::task::yield_now().await;
        gate.add_permits(100);
        for call in calls {
            assert_eq!(call.await.unwrap(), "t1");
        }
        assert_eq!(cache.source().fetched(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn while_one_call_refreshes_the_others_use_the_valid_token_without_waiting() {
        let gate = Arc::new(Semaphore::new(1));
        let source = Counting { gate: Some(gate.clone()), ..Counting::new(HOUR) };
        let cache = Arc::new(TokenCache::new(source));
        cache.token().await.unwrap();
        tokio::time::advance(HOUR - MAX_MARGIN).await;
        let refreshing = {
            let cache = cache.clone();
            tokio::spawn(async move { cache.token().await.unwrap().expose().to_owned() })
        };
        tokio::task::yield_now().await;
        // The refresh is held at the gate: every other call is answered at once with `t1`.
        for _ in 0..10 {
            assert_eq!(cache.token().await.unwrap().expose(), "t1");
        }
        assert_eq!(cache.source().fetched(), 2);
        gate.add_permits(1);
        assert_eq!(refreshing.await.unwrap(), "t2");
        assert_eq!(cache.token().await.unwrap().expose(), "t2");
        assert_eq!(cache.source().fetched(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_refresh_keeps_the_valid_token_and_tries_again_later() {
        let source = Counting { fail: vec![2], ..Counting::new(HOUR) };
        let cache = TokenCache::new(source);
        cache.token().await.unwrap();
        tokio::time::advance(HOUR - MAX_MARGIN).await;
        assert_eq!(cache.token().await.unwrap().expose(), "t1");
        assert_eq!(cache.token().await.unwrap().expose(), "t1");
        assert_eq!(cache.source().fetched(), 2, "not again on the next call");
        tokio::time::advance(RETRY_AFTER).await;
        assert_eq!(cache.token().await.unwrap().expose(), "t3");
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_token_is_never_sent_and_a_failed_fetch_is_the_error() {
        let source = Counting { fail: vec![2], ..Counting::new(HOUR) };
        let cache = TokenCache::new(source);
        cache.token().await.unwrap();
        tokio::time::advance(HOUR).await;
        let error = cache.token().await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Transport);
        assert_eq!(cache.token().await.unwrap().expose(), "t3");
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_endpoint_that_does_not_answer_is_a_timeout_and_the_valid_token_serves_meanwhile() {
        let gate = Arc::new(Semaphore::new(1));
        let cache = TokenCache::new(Counting { gate: Some(gate.clone()), ..Counting::new(HOUR) });
        cache.token().await.unwrap();
        // Due for refresh, still valid: the endpoint says nothing, the token in hand serves.
        tokio::time::advance(HOUR - MAX_MARGIN).await;
        let started = Instant::now();
        assert_eq!(cache.token().await.unwrap().expose(), "t1");
        assert_eq!(started.elapsed(), FETCH_LIMIT);
        // Expired: the silence is the error, named.
        tokio::time::advance(MAX_MARGIN).await;
        let error = cache.token().await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Timeout);
        assert!(error.to_string().contains("did not answer within 10s"), "{error}");
    }

    #[tokio::test(start_paused = true)]
    async fn calls_waiting_on_a_fetch_that_fails_share_its_failure_rather_than_each_waiting_again() {
        let gate = Arc::new(Semaphore::new(0));
        let cache = Arc::new(TokenCache::new(Counting { gate: Some(gate.clone()), ..Counting::new(HOUR) }));
        let started = Instant::now();
        let calls: Vec<_> = (0..5)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move { (cache.token().await.unwrap_err().kind(), Instant::now()) })
            })
            .collect();
        for call in calls {
            let (kind, at) = call.await.unwrap();
            assert_eq!((kind, at - started), (ErrorKind::Timeout, FETCH_LIMIT), "one silent fetch, not five");
        }
        assert_eq!(cache.source().fetched(), 1);
        // A call that comes after fetches again.
        gate.add_permits(1);
        assert_eq!(cache.token().await.unwrap().expose(), "t2");
    }

    #[tokio::test(start_paused = true)]
    async fn a_forgotten_token_is_fetched_again() {
        let cache = TokenCache::new(Counting::new(HOUR));
        cache.token().await.unwrap();
        cache.forget();
        assert_eq!(cache.token().await.unwrap().expose(), "t2");
    }
}
