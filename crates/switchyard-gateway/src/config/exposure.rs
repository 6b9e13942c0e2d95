//! Who can reach a gateway at its address, and whether that is allowed with its keys.

use std::net::{SocketAddr, ToSocketAddrs};

use super::{Kind, Loaded, Source};
use crate::config::settings::GatewaySettings;

/// Who can reach a gateway at an address, and whether that is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exposure {
    /// Listening on loopback: only this machine can reach it.
    Loopback,
    /// Beyond loopback with only simulated providers: nothing to spend.
    Demo,
    /// Beyond loopback, clients need a gateway key and operators the admin key.
    Guarded,
    /// Beyond loopback without keys, because `gateway.open: true` says so.
    OpenRelay,
    /// Beyond loopback with real providers and these settings missing: `serve` refuses.
    Refused(Vec<&'static str>),
}

impl Exposure {
    /// Whether `/metrics` asks for the admin key at this exposure.
    pub fn guards_metrics(&self, settings: &GatewaySettings) -> bool {
        !matches!(self, Exposure::Loopback) && !settings.metrics_open
    }
}

/// Whether a gateway may listen on `listen` with `loaded`'s providers and keys.
pub fn exposure(listen: SocketAddr, loaded: &Loaded) -> Exposure {
    exposure_of(listen, loaded.providers.iter().map(|p| p.kind), &loaded.gateway)
}

/// [`exposure`] of providers of `kinds` (as the file writes them) behind `gateway`'s keys.
pub(crate) fn exposure_of<'a>(
    listen: SocketAddr,
    mut kinds: impl Iterator<Item = &'a str>,
    gateway: &GatewaySettings,
) -> Exposure {
    if listen.ip().to_canonical().is_loopback() {
        return Exposure::Loopback;
    }
    if kinds.all(|kind| kind == Kind::Simulated.as_str()) {
        return Exposure::Demo;
    }
    let mut missing = Vec::new();
    if gateway.keys.is_empty() {
        missing.push("gateway.keys");
    }
    if gateway.admin_key.is_none() {
        missing.push("gateway.admin_key");
    }
    match (missing.is_empty(), gateway.open) {
        (true, _) => Exposure::Guarded,
        (false, true) => Exposure::OpenRelay,
        (false, false) => Exposure::Refused(missing),
    }
}

/// The address `text` names: `127.0.0.1:4680`, `[::1]:4680`, or a host name and a port
/// (`localhost:4680`) resolved now. Of a name's addresses the first IPv4 one is taken (clients
/// of `localhost` try it), else the first.
pub fn listen_address(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    let not_address = || format!("`{text}` is not an address: write host:port, like 127.0.0.1:4680");
    let (host, port) = text.rsplit_once(':').ok_or_else(not_address)?;
    let port: u16 = port.parse().map_err(|_| not_address())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(not_address());
    }
    let unresolved = |why: String| {
        format!(
            "`{host}` in `{text}` does not resolve ({why}): use a name this machine resolves, or an address like 127.0.0.1:4680"
        )
    };
    let addresses: Vec<SocketAddr> =
        (host, port).to_socket_addrs().map_err(|error| unresolved(error.to_string()))?.collect();
    addresses
        .iter()
        .find(|address| address.is_ipv4())
        .or(addresses.first())
        .copied()
        .ok_or_else(|| unresolved("no address".to_owned()))
}

/// Why `serve` refuses to start at `listen`: which settings are missing and how to set them,
/// naming only those that are missing. Names settings and variables, never a key.
pub fn refusal(listen: SocketAddr, loaded: &Loaded, missing: &[&str]) -> String {
    let paid: Vec<&str> = loaded
        .providers
        .iter()
        .filter(|p| p.kind != Kind::Simulated.as_str())
        .map(|p| p.id.as_str())
        .collect();
    let keys = missing.contains(&"gateway.keys");
    let admin = missing.contains(&"gateway.admin_key");
    let stake = match (keys, admin) {
        (true, true) => format!("spend the accounts of {} and use /admin and /metrics", paid.join(", ")),
        (true, false) => format!("spend the accounts of {}", paid.join(", ")),
        // Admin endpoints take a client key when there is no admin key.
        (false, _) => "use /admin and /metrics with a client key".to_owned(),
    };
    let mut settings = Vec::new();
    let mut variables = Vec::new();
    if keys {
        settings.push("keys: [env://SWITCHYARD_KEY]");
        variables.push(("SWITCHYARD_KEY", "the key clients send"));
    }
    if admin {
        settings.push("admin_key: env://SWITCHYARD_ADMIN_KEY");
        variables.push(("SWITCHYARD_ADMIN_KEY", "for /admin and /metrics"));
    }
    let block = format!("`gateway: {{ {} }}`", settings.join(", "));
    let how = match loaded.source {
        Source::Environment(_) => {
            let set: Vec<String> = variables.iter().map(|(name, what)| format!("{name} ({what})")).collect();
            format!("set {}, or write a config file with {block}", set.join(" and "))
        }
        _ => {
            let names: Vec<&str> = variables.iter().map(|(name, _)| *name).collect();
            let from = if names.len() == 1 {
                "the key comes from that variable"
            } else {
                "the keys come from those variables"
            };
            format!("add {block} to the configuration ({from})")
        }
    };
    format!(
        "refusing to listen on {listen} without {}: anyone who can reach it could {stake}. To fix: {how}; \
         or listen on 127.0.0.1; or set `gateway.open: true` to run an open relay on purpose",
        missing.join(" and "),
    )
}
