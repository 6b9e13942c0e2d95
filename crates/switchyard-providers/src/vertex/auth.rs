//! Google credentials for Vertex AI: where they are found (a file the configuration names, or
//! Application Default Credentials), what the file holds, and the access tokens they give.
//!
//! The OAuth exchanges are `yup-oauth2`'s: a service account's JWT, signed with its private key
//! and exchanged at the key's `token_uri`; an authorized user's refresh token (gcloud's
//! `application-default login`); workload identity federation (`external_account`: a subject
//! token from a file or a URL, exchanged at its `token_url`, then the service account it
//! impersonates, if any); the metadata server of GCE, GKE and Cloud Run. Switchyard only finds
//! the credentials and picks the flow. What is secret in them (private keys, refresh tokens,
//! client secrets, assertions, access tokens) never reaches a `Debug`, an error or a log line:
//! the parsed files are held behind types of this module that print a summary only.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use switchyard::credential::Secret;
use switchyard::provider::BoxFuture;
use switchyard::{ErrorKind, ProviderError};
use yup_oauth2::authorized_user::AuthorizedUserSecret;
use yup_oauth2::external_account::ExternalAccountSecret;
use yup_oauth2::{ApplicationDefaultCredentialsFlowOpts, CustomHyperClientBuilder, ServiceAccountKey};

use super::token::{FetchToken, FreshToken};
use crate::http;

/// The OAuth scope Vertex AI needs.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// The metadata server's host when `GCE_METADATA_HOST` does not name another.
pub const METADATA_HOST: &str = "metadata.google.internal";

/// How long a token whose answer gave no lifetime is used.
const UNSTATED_LIFETIME: Duration = Duration::from_secs(300);

/// Where a provider's Google credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GoogleCredentials {
    /// A credentials file the configuration names (`credentials: /path.json`).
    File(PathBuf),
    /// Application Default Credentials: the file `GOOGLE_APPLICATION_CREDENTIALS` names.
    EnvironmentFile(PathBuf),
    /// Application Default Credentials: gcloud's `application_default_credentials.json`
    /// (`gcloud auth application-default login`).
    GcloudFile(PathBuf),
    /// Application Default Credentials: the metadata server (GCE, GKE, Cloud Run) at this host
    /// (`GCE_METADATA_HOST`, else [`METADATA_HOST`]).
    MetadataServer(String),
}

impl GoogleCredentials {
    /// Application Default Credentials, found in Google's order with the environment read
    /// through `env`: the file `GOOGLE_APPLICATION_CREDENTIALS` names; else gcloud's
    /// `application_default_credentials.json` in `$CLOUDSDK_CONFIG` (else `~/.config/gcloud`,
    /// `%APPDATA%\gcloud` on Windows) when it exists; else the metadata server, at
    /// `GCE_METADATA_HOST` when set. Nothing is read but the environment and whether gcloud's
    /// file exists.
    ///
    /// ```
    /// use switchyard_providers::vertex::GoogleCredentials;
    ///
    /// let env = |name: &str| (name == "GOOGLE_APPLICATION_CREDENTIALS").then(|| "/secrets/sa.json".to_owned());
    /// assert_eq!(
    ///     GoogleCredentials::application_default(&env),
    ///     GoogleCredentials::EnvironmentFile("/secrets/sa.json".into())
    /// );
    /// ```
    pub fn application_default(env: &dyn Fn(&str) -> Option<String>) -> Self {
        let set = |name: &str| env(name).filter(|value| !value.trim().is_empty());
        if let Some(path) = set("GOOGLE_APPLICATION_CREDENTIALS") {
            return GoogleCredentials::EnvironmentFile(PathBuf::from(path));
        }
        let config_dir = set("CLOUDSDK_CONFIG").map(PathBuf::from).or_else(|| {
            let home = set("HOME").map(|home| Path::new(&home).join(".config"));
            home.or_else(|| set("APPDATA").map(PathBuf::from)).map(|dir| dir.join("gcloud"))
        });
        if let Some(file) = config_dir.map(|dir| dir.join("application_default_credentials.json"))
            && file.is_file()
        {
            return GoogleCredentials::GcloudFile(file);
        }
        GoogleCredentials::MetadataServer(
            set("GCE_METADATA_HOST").unwrap_or_else(|| METADATA_HOST.to_owned()),
        )
    }

    /// The credentials file, when these credentials are one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            GoogleCredentials::File(path)
            | GoogleCredentials::EnvironmentFile(path)
            | GoogleCredentials::GcloudFile(path) => Some(path),
            GoogleCredentials::MetadataServer(_) => None,
        }
    }

    /// Where they were found, as an operator reads it.
    pub fn origin(&self) -> String {
        match self {
            GoogleCredentials::File(path) => format!("the file {}", path.display()),
            GoogleCredentials::EnvironmentFile(path) => {
                format!(
                    "application default credentials: GOOGLE_APPLICATION_CREDENTIALS ({})",
                    path.display()
                )
            }
            GoogleCredentials::GcloudFile(path) => {
                format!("application default credentials: gcloud's file ({})", path.display())
            }
            GoogleCredentials::MetadataServer(host) => {
                format!("application default credentials: the metadata server at {host}")
            }
        }
    }

    /// What the credentials are, masked, and where they were found (`service account
    /// sa@p.iam.gserviceaccount.com (key ****1a2b), from the file /secrets/sa.json`): the file
    /// is read and checked, nothing is sent. The error says what is wrong with the file.
    pub fn describe(&self) -> Result<String, AuthError> {
        let what = match self.file() {
            Some(path) => CredentialFile::read(path)?.summary(),
            None => "the metadata server's default service account".to_owned(),
        };
        Ok(format!("{what}, from {}", self.origin()))
    }
}

/// A failure to get an access token, or to read the credentials: the catalog kind the call
/// fails with, and a message that names the credentials and the cause, never a secret.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct AuthError {
    kind: ErrorKind,
    message: String,
}

impl AuthError {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    /// The kind the call fails with: `auth` when the credentials are refused or unusable,
    /// `transport` or `timeout` when the token endpoint could not be reached,
    /// `unavailable` when it answered something that is not a token.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The failed call's error.
    pub(crate) fn into_provider_error(self) -> ProviderError {
        ProviderError::new(self.kind, self.message)
    }
}

/// What a credentials file holds, by its `type`.
pub(crate) enum CredentialFile {
    ServiceAccount(Box<ServiceAccountKey>),
    AuthorizedUser(AuthorizedUserSecret),
    ExternalAccount(Box<ExternalAccountSecret>),
}

impl fmt::Debug for CredentialFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CredentialFile({})", self.summary())
    }
}

impl CredentialFile {
    /// Reads and parses the file at `path`. The error names the file and what is wrong, but
    /// quotes nothing of it (a value in the wrong place may be a secret).
    pub(crate) fn read(path: &Path) -> Result<Self, AuthError> {
        let invalid = |what: String| {
            AuthError::new(ErrorKind::Auth, format!("the Google credentials file {} {what}", path.display()))
        };
        // A key file is a few kilobytes.
        let text = crate::files::read_bounded(path, 1 << 20)
            .map_err(|error| invalid(format!("cannot be read: {error}")))?;
        let value: Value = serde_json::from_slice(&text).map_err(|error| {
            invalid(format!("is not JSON (line {}, column {})", error.line(), error.column()))
        })?;
        let shape = |error: serde_json::Error| {
            let message = error.to_string();
            // A missing field names only the field; other messages may quote a value.
            let what = if message.starts_with("missing field") {
                message
            } else {
                "has a field of the wrong type".to_owned()
            };
            invalid(what)
        };
        let kind = value.get("type").and_then(Value::as_str).unwrap_or_default().to_owned();
        match kind.as_str() {
            "service_account" => {
                Ok(CredentialFile::ServiceAccount(Box::new(serde_json::from_value(value).map_err(shape)?)))
            }
            "authorized_user" => Ok(CredentialFile::AuthorizedUser(serde_json::from_value(value).map_err(shape)?)),
            "external_account" => {
                Ok(CredentialFile::ExternalAccount(Box::new(serde_json::from_value(value).map_err(shape)?)))
            }
            "" => Err(invalid("has no `type`: give a service account key, gcloud's application default credentials or a workload identity federation file".to_owned())),
            other => Err(invalid(format!(
                "is of type `{other}`, which Switchyard does not read: give a `service_account`, `authorized_user` or `external_account` file"
            ))),
        }
    }

    /// What the file is, masked: the service account's email and the last characters of its
    /// key id, the OAuth client of an authorized user, the audience of a federation.
    pub(crate) fn summary(&self) -> String {
        match self {
            CredentialFile::ServiceAccount(key) => {
                let id = key.private_key_id.as_deref().map(mask).unwrap_or_else(|| "no key id".to_owned());
                format!("service account {} (key {id})", key.client_email)
            }
            CredentialFile::AuthorizedUser(user) => {
                format!("authorized user (OAuth client {})", mask(&user.client_id))
            }
            CredentialFile::ExternalAccount(account) => {
                let through = match account.service_account_impersonation_url.as_deref() {
                    Some(url) => format!(", impersonating {}", impersonated(url)),
                    None => String::new(),
                };
                format!("workload identity federation ({}{through})", account.audience)
            }
        }
    }
}

/// `text` with all but its last four characters masked (all of it when it is short).
fn mask(text: &str) -> String {
    let count = text.chars().count();
    if count <= 8 {
        return "****".to_owned();
    }
    let tail: String = text.chars().skip(count - 4).collect();
    format!("****{tail}")
}

/// The service account an impersonation URL names (`.../serviceAccounts/{email}:generateAccessToken`).
fn impersonated(url: &str) -> &str {
    let tail = url.rsplit("serviceAccounts/").next().unwrap_or(url);
    tail.split(':').next().unwrap_or(tail)
}

/// The connector the token client uses: this crate's TLS, within the connect timeout.
type Connector = http::TokenConnector;

/// A yup-oauth2 authenticator over [`Connector`].
type Authenticator = yup_oauth2::authenticator::Authenticator<Connector>;

/// Tokens from Google's OAuth endpoints for one set of credentials. The authenticator is made
/// on the first fetch (making it is async), and kept.
pub(crate) struct GoogleTokens {
    what: String,
    source: Source,
    connector: Connector,
    authenticator: tokio::sync::OnceCell<Authenticator>,
}

/// What the tokens are exchanged from.
enum Source {
    File(CredentialFile),
    /// The metadata server's token URL.
    Metadata(String),
}

impl fmt::Debug for GoogleTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GoogleTokens").field("credentials", &self.what).finish_non_exhaustive()
    }
}

impl GoogleTokens {
    /// Tokens for `credentials` (a file is read and parsed now), fetched over `connector`.
    pub(crate) fn new(credentials: &GoogleCredentials, connector: Connector) -> Result<Self, AuthError> {
        let (source, what) = match credentials {
            GoogleCredentials::MetadataServer(host) => {
                let url = format!("http://{host}/computeMetadata/v1/instance/service-accounts/default/token");
                (Source::Metadata(url), format!("the metadata server at {host}"))
            }
            _ => {
                let path = credentials.file().unwrap_or(Path::new(""));
                let file = CredentialFile::read(path)?;
                let what = format!("{} ({})", file.summary(), path.display());
                (Source::File(file), what)
            }
        };
        Ok(Self { what, source, connector, authenticator: tokio::sync::OnceCell::new() })
    }

    /// What the tokens come from, masked.
    pub(crate) fn describe(&self) -> &str {
        &self.what
    }

    async fn authenticator(&self) -> Result<&Authenticator, AuthError> {
        self.authenticator.get_or_try_init(|| self.build()).await
    }

    async fn build(&self) -> Result<Authenticator, AuthError> {
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            // Tokens are fetched rarely, from whichever worker thread needs one: a kept
            // connection would belong to the runtime that opened it.
            .pool_max_idle_per_host(0)
            .build::<_, String>(self.connector.clone());
        let client = CustomHyperClientBuilder::from(client);
        let built = match &self.source {
            Source::File(CredentialFile::ServiceAccount(key)) => {
                yup_oauth2::ServiceAccountAuthenticator::with_client((**key).clone(), client).build().await
            }
            Source::File(CredentialFile::AuthorizedUser(user)) => {
                yup_oauth2::AuthorizedUserAuthenticator::with_client(user.clone(), client).build().await
            }
            Source::File(CredentialFile::ExternalAccount(account)) => {
                yup_oauth2::ExternalAccountAuthenticator::with_client((**account).clone(), client)
                    .build()
                    .await
            }
            Source::Metadata(url) => {
                let opts = ApplicationDefaultCredentialsFlowOpts { metadata_url: Some(url.clone()) };
                match yup_oauth2::ApplicationDefaultCredentialsAuthenticator::with_client(opts, client).await
                {
                    yup_oauth2::authenticator::ApplicationDefaultCredentialsTypes::InstanceMetadata(
                        builder,
                    ) => builder.build().await,
                    // The library prefers GOOGLE_APPLICATION_CREDENTIALS of this process, which
                    // the configuration did not choose.
                    yup_oauth2::authenticator::ApplicationDefaultCredentialsTypes::ServiceAccount(_) => {
                        return Err(AuthError::new(
                            ErrorKind::Auth,
                            "GOOGLE_APPLICATION_CREDENTIALS is set in this process but was not read when the configuration was: restart with the environment the configuration was checked in",
                        ));
                    }
                }
            }
        };
        built.map_err(|error| {
            AuthError::new(ErrorKind::Auth, format!("{}: the credentials cannot be used: {error}", self.what))
        })
    }
}

impl FetchToken for GoogleTokens {
    fn fetch(&self) -> BoxFuture<'_, Result<FreshToken, AuthError>> {
        Box::pin(async move {
            let authenticator = self.authenticator().await?;
            let token =
                authenticator.force_refreshed_token(&[SCOPE]).await.map_err(|error| self.failed(error))?;
            let Some(text) = token.token().filter(|text| !text.is_empty()) else {
                return Err(self.failed(yup_oauth2::Error::MissingAccessToken));
            };
            let lifetime = token.expiration_time().map_or(UNSTATED_LIFETIME, |expires| {
                let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
                let left = u128::try_from(expires.unix_timestamp_nanos()).unwrap_or(0).saturating_sub(now);
                Duration::from_nanos(u64::try_from(left).unwrap_or(u64::MAX))
            });
            Ok(FreshToken { token: Secret::new(text), lifetime })
        })
    }
}

impl GoogleTokens {
    /// The error of a failed exchange: the token endpoint out of reach is a transport failure
    /// (or a timeout), an answer that is no token or an error code OAuth does not name the
    /// endpoint's fault (`unavailable`); a refusal is `auth`.
    /// The library's words for a refusal are the endpoint's error code and description.
    fn failed(&self, error: yup_oauth2::Error) -> AuthError {
        use yup_oauth2::Error as E;
        let (kind, cause) = match &error {
            E::HttpError(error) if error.is_timeout() => (ErrorKind::Timeout, error.to_string()),
            E::HttpError(_) | E::HttpClientError(_) => (ErrorKind::Transport, error.to_string()),
            E::JSONError(json) => (
                ErrorKind::Unavailable,
                format!(
                    "the token endpoint answered something that is not a token (line {}, column {})",
                    json.line(),
                    json.column()
                ),
            ),
            // The endpoint's own failure (`server_error`, `internal_failure`, ...) passes: not a
            // reason to bench the credential. Any other code refuses the credentials.
            E::AuthError(refused) if transient(&refused.error) => {
                (ErrorKind::Unavailable, format!("the token endpoint failed: {refused}"))
            }
            E::AuthError(refused) => (ErrorKind::Auth, format!("the token endpoint refused: {refused}")),
            _ => (ErrorKind::Auth, error.to_string()),
        };
        let kind = match &error {
            E::HttpClientError(yup_oauth2::client::SendError::Timeout) => ErrorKind::Timeout,
            _ => kind,
        };
        AuthError::new(kind, format!("could not get a Google access token for {}: {cause}", self.what))
    }
}

/// Whether a token endpoint's error code says it failed itself, for a while: OAuth's
/// `server_error` and `temporarily_unavailable`, and the codes Google's backends answer with.
fn transient(code: &yup_oauth2::error::AuthErrorCode) -> bool {
    use yup_oauth2::error::AuthErrorCode;
    let failing =
        ["server_error", "temporarily_unavailable", "internal_failure", "backend_error", "internal_error"];
    matches!(code, AuthErrorCode::Other(code) if failing.contains(&code.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_failing_endpoints_codes_are_transient_not_a_refusal() {
        use yup_oauth2::error::AuthErrorCode;
        assert!(transient(&AuthErrorCode::Other("internal_failure".into())));
        assert!(!transient(&AuthErrorCode::Other("disabled_client".into())));
        assert!(!transient(&AuthErrorCode::InvalidGrant));
    }

    #[test]
    fn masking_keeps_four_characters_of_long_ids_only() {
        assert_eq!(mask("0123456789abcdef"), "****cdef");
        assert_eq!(mask("short"), "****");
    }

    #[test]
    fn the_impersonated_account_is_read_from_its_url() {
        let url = "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/sa@p.iam.gserviceaccount.com:generateAccessToken";
        assert_eq!(impersonated(url), "sa@p.iam.gserviceaccount.com");
    }
}
