//! API keys and their non-secret identities.

use std::fmt;
use std::sync::Arc;

/// A secret string (an API key). It never prints: `Debug` shows `Secret(***)` and there is no
/// `Display`. Read it with [`Secret::expose`] at the one place that sends it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<str>);

impl Secret {
    /// Wraps a key; only [`Secret::expose`] reads it back.
    pub fn new(value: impl Into<Arc<str>>) -> Self {
        Secret(value.into())
    }

    /// The secret itself; call only where it goes on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of this secret replaced by `[redacted]`: for anything an
    /// upstream sends back, which may echo the key. A key cut short is removed too: from its
    /// first 8 characters on at the end of the text (an excerpt that shortened it, with or
    /// without a closing `…`), from its first 12 wherever it stands (a quoted request that
    /// cut it). Secrets shorter than 8 characters are not searched for, since they would match
    /// ordinary words; real keys are dozens long.
    ///
    /// ```
    /// use switchyard::credential::Secret;
    ///
    /// let key = Secret::new("sk-live-0123456789");
    /// assert_eq!(key.redact("bad key sk-live-0123456789!"), "bad key [redacted]!");
    /// assert_eq!(key.redact("bad key sk-live-01234…"), "bad key [redacted]…");
    /// assert_eq!(key.redact("sent 'Bearer sk-live-0123', refused"), "sent 'Bearer [redacted]', refused");
    /// assert_eq!(key.redact("sk-live-0 keys are refused"), "sk-live-0 keys are refused");
    /// // A short secret is cut wherever it stands whole.
    /// assert_eq!(Secret::new("tenant-42x").redact("token tenant-42x refused"), "token [redacted] refused");
    /// assert_eq!(Secret::new("clé-secrète-9").redact("bad clé-secrète-9"), "bad [redacted]");
    /// ```
    pub fn redact<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        const SHORTEST: usize = 8;
        const SHORTEST_WITHIN: usize = 12;
        let key = &*self.0;
        if key.len() < SHORTEST {
            return text.into();
        }
        // Its first 8 characters' worth of bytes, to the next character's start.
        let head = &key[..(SHORTEST..=key.len()).find(|&at| key.is_char_boundary(at)).unwrap_or(key.len())];
        if !text.contains(head) {
            return text.into();
        }
        let mut clean = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find(head) {
            let echoed = &rest[at..];
            let mut len = echoed.bytes().zip(key.bytes()).take_while(|(a, b)| a == b).count();
            while !echoed.is_char_boundary(len) {
                len -= 1;
            }
            let cut = len == key.len() || len >= SHORTEST_WITHIN || matches!(&echoed[len..], "" | "…");
            clean.push_str(&rest[..at]);
            clean.push_str(if cut { "[redacted]" } else { &echoed[..len] });
            rest = &echoed[len..];
        }
        clean.push_str(rest);
        clean.into()
    }
}

/// Whether a name (an HTTP header's, a URL's query parameter's) says what it holds is a
/// credential: `authorization`, `x-api-key`, a token, a password, a cookie, a session, a
/// signature. What such a name holds is masked wherever it is shown and cut out of errors.
///
/// ```
/// use switchyard::credential::names_a_secret;
///
/// assert!(names_a_secret("X-Proxy-Token") && names_a_secret("password"));
/// assert!(!names_a_secret("anthropic-beta") && !names_a_secret("protocol"));
/// ```
pub fn names_a_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["auth", "key", "token", "secret", "cookie", "pass", "signature", "session"]
        .iter()
        .any(|word| name.contains(word))
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// A short, stable, non-secret name for one credential: 12 hex digits of a hash of the
/// provider kind, base URL and key. Used in logs, events, metrics and shared state, so that two
/// replicas with the same key agree on it and nobody learns the key from it.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct CredentialId(Arc<str>);

impl CredentialId {
    /// The id of a key for a provider of `kind` at `base_url`; `None` for keyless providers.
    pub fn derive(kind: &str, base_url: &str, key: Option<&Secret>) -> Self {
        // FNV-1a, 64 bits: stable across builds and platforms (std's hasher promises neither).
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let parts = [kind, "\u{1f}", base_url, "\u{1f}", key.map_or("", Secret::expose)];
        for byte in parts.iter().flat_map(|part| part.bytes()) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        CredentialId(format!("{:012x}", hash >> 16).into())
    }

    /// The 12 hex digits, as logs, events, metrics and shared state carry them.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CredentialId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for CredentialId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CredentialId({})", self.0)
    }
}

/// One key of a provider (or none, for local servers), with its id.
#[derive(Clone, Debug)]
pub struct Credential {
    id: CredentialId,
    key: Option<Secret>,
}

impl Credential {
    /// A credential for a provider of `kind` at `base_url`.
    pub fn new(kind: &str, base_url: &str, key: Option<Secret>) -> Self {
        Self { id: CredentialId::derive(kind, base_url, key.as_ref()), key }
    }

    /// The credential of a provider without keys (a local server). Without a key there is no
    /// account to share, so the provider id joins the hash: two keyless providers of one kind
    /// never share health.
    pub fn keyless(kind: &str, base_url: &str, provider_id: &str) -> Self {
        Self { id: CredentialId::derive(kind, &format!("{base_url}\u{1f}{provider_id}"), None), key: None }
    }

    /// The non-secret name health, events, trails and logs know this credential by.
    pub fn id(&self) -> &CredentialId {
        &self.id
    }

    /// The key to send; `None` for a keyless provider (a local server).
    pub fn key(&self) -> Option<&Secret> {
        self.key.as_ref()
    }

    /// The key with all but its last four characters masked, for operator displays.
    pub fn masked(&self) -> String {
        match &self.key {
            None => "(none)".to_owned(),
            Some(key) => {
                let key = key.expose();
                let tail: String = key.chars().rev().take(4).collect::<Vec<_>>().into_iter().rev().collect();
                if key.chars().count() <= 8 { "****".to_owned() } else { format!("****{tail}") }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn a_key_cut_anywhere_by_an_excerpt_leaves_no_more_than_its_first_seven_characters() {
        let key = Secret::new("sk-live-SECRET-0123456789abcdef");
        let text = "Incorrect API key provided: sk-live-SECRET-0123456789abcdef. See the docs.";
        for end in 0..=text.len() {
            for ellipsis in ["", "…"] {
                let excerpt = format!("{}{ellipsis}", &text[..end]);
                let clean = key.redact(&excerpt);
                assert!(!clean.contains("sk-live-"), "{excerpt:?} became {clean:?}");
                assert!(!clean.contains("SECRET"), "{excerpt:?} became {clean:?}");
            }
        }
    }
}
