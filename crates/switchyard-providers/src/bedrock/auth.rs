//! Where a Bedrock provider's AWS credentials come from, and keeping them fresh.
//!
//! The chain is the AWS SDK's own (`aws-config`): explicit keys when the configuration gives
//! them, else the default chain (environment, the shared config and credentials files with
//! their profiles, SSO, web identity / IRSA, ECS and EKS container credentials, EC2 instance
//! metadata); a `role_arn` is assumed on top of either through STS. Nothing here signs or
//! parses a credential file itself.
//!
//! The SDK's providers do not cache (an SDK client's identity cache does, refreshing on the
//! request that finds them expiring). [`CredentialCache`] keeps the last credentials and
//! refreshes temporary ones in a task of their own [`REFRESH_BEFORE`] their expiry, so that no
//! request waits for STS or the metadata service but the first, or one that finds them all
//! but expired ([`MIN_LEFT`]). One load at a time.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_config::BehaviorVersion;
use aws_config::sts::AssumeRoleProvider;
use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_types::region::Region;
use switchyard::credential::Secret;
use switchyard::{ErrorKind, ProviderError};

/// Temporary credentials are refreshed, off the request path, once they have less than this
/// left.
pub const REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);

/// Credentials with less than this left are not used: the request waits for new ones (a
/// request signed now may reach AWS a little later).
pub const MIN_LEFT: Duration = Duration::from_secs(15);

/// The session name of an assumed role, as CloudTrail shows it.
const SESSION_NAME: &str = "switchyard";

/// How a Bedrock provider authenticates with SigV4 (`aws:` in the configuration). Every field
/// is optional: with none, the AWS default chain decides.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AwsAuth {
    /// An explicit access key id (with [`secret_access_key`](Self::secret_access_key)).
    pub access_key_id: Option<Secret>,
    /// The secret of an explicit access key.
    pub secret_access_key: Option<Secret>,
    /// The session token of explicit temporary keys.
    pub session_token: Option<Secret>,
    /// The profile of the shared config and credentials files to use instead of
    /// `AWS_PROFILE` (or `default`).
    pub profile: Option<String>,
    /// A role assumed (STS `AssumeRole`) with the credentials found otherwise.
    pub role_arn: Option<String>,
}

impl std::fmt::Debug for AwsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsAuth")
            .field("access_key_id", &self.access_key_id.as_ref().map(|k| mask(k.expose())))
            .field("secret_access_key", &self.secret_access_key)
            .field("session_token", &self.session_token)
            .field("profile", &self.profile)
            .field("role_arn", &self.role_arn)
            .finish()
    }
}

impl AwsAuth {
    /// What the credentials come from, in words (`doctor` prints it before anything is
    /// loaded).
    pub fn source(&self) -> String {
        let base = match (&self.access_key_id, &self.profile) {
            (Some(id), _) => format!(
                "explicit keys ({}{})",
                mask(id.expose()),
                if self.session_token.is_some() { " with a session token" } else { "" }
            ),
            (None, Some(profile)) => format!("the AWS default chain with profile `{profile}`"),
            (None, None) => "the AWS default chain".to_owned(),
        };
        match &self.role_arn {
            Some(role) => format!("{base}, assuming {role}"),
            None => base,
        }
    }
}

/// An access key id as operators see it: its first four and last four characters
/// (`AKIA****MPLE`); short ones wholly masked.
pub fn mask(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= 12 {
        return "****".to_owned();
    }
    let head: String = chars[..4].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}****{tail}")
}

/// What a loaded set of credentials is, for operators: which provider of the chain gave them,
/// the access key id masked, and when they expire. No secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialsInfo {
    /// The provider of the chain that gave them (`Environment`, `Profile`, `WebIdentityToken`,
    /// `EcsContainer`, `IMDSv2`, `AssumeRoleProvider`, `switchyard-config`, ...).
    pub provider: String,
    /// The access key id, masked.
    pub access_key_id: String,
    /// Whether they carry a session token (temporary credentials).
    pub session_token: bool,
    /// When they expire; `None` for long-lived keys.
    pub expiry: Option<SystemTime>,
}

/// The credentials of one provider, kept and refreshed.
pub struct CredentialCache {
    region: String,
    auth: AwsAuth,
    /// The chain, built on the first load (building it reads files and the environment), or
    /// given.
    chain: tokio::sync::OnceCell<SharedCredentialsProvider>,
    /// The last credentials loaded.
    current: Mutex<Option<Credentials>>,
    /// Held while loading: one load at a time.
    loading: tokio::sync::Mutex<()>,
    /// How many loads the chain was asked for (tests read it).
    loads: std::sync::atomic::AtomicU32,
}

impl std::fmt::Debug for CredentialCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialCache").field("region", &self.region).field("auth", &self.auth).finish()
    }
}

impl CredentialCache {
    /// A cache for `auth` in `region`; nothing is loaded (nor read) yet.
    pub fn new(region: &str, auth: AwsAuth) -> Self {
        Self {
            region: region.to_owned(),
            auth,
            chain: tokio::sync::OnceCell::new(),
            current: Mutex::new(None),
            loading: tokio::sync::Mutex::new(()),
            loads: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// A cache over a chain of the caller's own (an embedding program's provider, a test's).
    pub fn with_provider(region: &str, provider: SharedCredentialsProvider) -> Self {
        let cache = Self::new(region, AwsAuth::default());
        let _ = cache.chain.set(provider);
        cache
    }

    /// How the credentials are sought, in words.
    pub fn source(&self) -> String {
        self.auth.source()
    }

    /// How many times the chain was asked for credentials.
    pub fn loads(&self) -> u32 {
        self.loads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Credentials for a call: the kept ones while they have more than [`MIN_LEFT`] left
    /// (refreshed in the background once they have less than [`REFRESH_BEFORE`]), else new
    /// ones, loaded now.
    pub async fn get(self: &Arc<Self>) -> Result<Credentials, ProviderError> {
        let now = SystemTime::now();
        if let Some(kept) = self.kept() {
            match kept.expiry() {
                None => return Ok(kept),
                Some(expiry) if expiry > now + REFRESH_BEFORE => return Ok(kept),
                Some(expiry) if expiry > now + MIN_LEFT => {
                    self.refresh_in_background();
                    return Ok(kept);
                }
                Some(_) => {}
            }
        }
        self.load(now).await
    }

    /// What the credentials a call would use are, loading them if need be.
    pub async fn info(self: &Arc<Self>) -> Result<CredentialsInfo, ProviderError> {
        let credentials = self.get().await?;
        Ok(CredentialsInfo {
            provider: provider_name(&credentials),
            access_key_id: mask(credentials.access_key_id()),
            session_token: credentials.session_token().is_some(),
            expiry: credentials.expiry(),
        })
    }

    /// Forgets the credentials in hand (AWS said they expired): the next call loads them again.
    pub(crate) fn forget(&self) {
        if let Ok(mut kept) = self.current.lock() {
            *kept = None;
        }
    }

    fn kept(&self) -> Option<Credentials> {
        self.current.lock().ok().and_then(|kept| kept.clone())
    }

    /// Loads new credentials unless another load, finished while this one waited, got ones
    /// good at `now`.
    async fn load(&self, now: SystemTime) -> Result<Credentials, ProviderError> {
        let _one = self.loading.lock().await;
        if let Some(kept) = self.kept()
            && kept.expiry().is_none_or(|expiry| expiry > now + REFRESH_BEFORE)
        {
            return Ok(kept);
        }
        let chain = self.chain.get_or_init(|| self.build()).await;
        self.loads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let loaded = chain.provide_credentials().await.map_err(|error| {
            let detail = aws_smithy_types::error::display::DisplayErrorContext(&error).to_string();
            ProviderError::new(
                ErrorKind::Auth,
                format!("no AWS credentials could be loaded ({}): {detail}", self.auth.source()),
            )
        })?;
        if let Ok(mut kept) = self.current.lock() {
            *kept = Some(loaded.clone());
        }
        Ok(loaded)
    }

    /// Starts a refresh in a task of its own, unless one is running.
    fn refresh_in_background(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        if self.loading.try_lock().is_err() {
            return;
        }
        let cache = Arc::clone(self);
        runtime.spawn(async move {
            // A failure here is met again, and reported, by the call that needs new ones.
            let _ = cache.load(SystemTime::now()).await;
        });
    }

    /// The chain: explicit keys or the default chain, and the role on top.
    async fn build(&self) -> SharedCredentialsProvider {
        let base = match (&self.auth.access_key_id, &self.auth.secret_access_key) {
            (Some(id), Some(secret)) => SharedCredentialsProvider::new(Credentials::new(
                id.expose(),
                secret.expose(),
                self.auth.session_token.as_ref().map(|t| t.expose().to_owned()),
                None,
                "switchyard-config",
            )),
            _ => {
                let config = self.loader().load().await;
                match config.credentials_provider() {
                    Some(chain) => chain,
                    None => SharedCredentialsProvider::new(NoCredentials),
                }
            }
        };
        let Some(role) = &self.auth.role_arn else { return base };
        let config = self.loader().load().await;
        let assumed = AssumeRoleProvider::builder(role)
            .session_name(SESSION_NAME)
            .region(Region::new(self.region.clone()))
            .configure(&config)
            .build_from_provider(base)
            .await;
        SharedCredentialsProvider::new(assumed)
    }

    fn loader(&self) -> aws_config::ConfigLoader {
        let mut loader =
            aws_config::defaults(BehaviorVersion::latest()).region(Region::new(self.region.clone()));
        if let Some(profile) = &self.auth.profile {
            loader = loader.profile_name(profile);
        }
        loader
    }
}

/// The name of the chain's provider that gave `credentials`, as the SDK's `Debug` writes it.
fn provider_name(credentials: &Credentials) -> String {
    // `Credentials` keeps its provider name private; its `Debug` (which masks every secret)
    // shows it as `provider_name: "..."`.
    let debug = format!("{credentials:?}");
    debug
        .split("provider_name: \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or("unknown")
        .to_owned()
}

/// A chain that has nothing: what a loader without credentials gives.
#[derive(Debug)]
struct NoCredentials;

impl ProvideCredentials for NoCredentials {
    fn provide_credentials<'a>(&'a self) -> aws_credential_types::provider::future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        aws_credential_types::provider::future::ProvideCredentials::ready(Err(
            aws_credential_types::provider::error::CredentialsError::not_loaded_no_source(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_access_key_id_is_masked_to_its_ends() {
        assert_eq!(mask("AKIAIOSFODNN7EXAMPLE"), "AKIA****MPLE");
        assert_eq!(mask("short"), "****");
    }

    #[test]
    fn debug_shows_no_secret() {
        let auth = AwsAuth {
            access_key_id: Some(Secret::new("AKIAIOSFODNN7EXAMPLE")),
            secret_access_key: Some(Secret::new("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")),
            session_token: Some(Secret::new("FwoGZXIvYXdzEXAMPLETOKEN")),
            ..AwsAuth::default()
        };
        let text = format!("{auth:?} {}", auth.source());
        assert!(!text.contains("wJalr") && !text.contains("FwoGZ") && !text.contains("IOSFODNN"), "{text}");
    }
}
