//! The TOML configuration file: settings for commands not given them as flags or environment.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// The file's contents; every key is optional. Unknown keys are refused, so that a typo does
/// not silently do nothing.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// Node URLs.
    #[serde(default)]
    pub(crate) nodes: Vec<String>,
    /// Longest TTL accepted (and default quarantine), e.g. "1m".
    #[serde(default, deserialize_with = "duration")]
    pub(crate) max_ttl: Option<Duration>,
    /// Restart quarantine, e.g. "1m"; "0s" turns it off.
    #[serde(default, deserialize_with = "duration")]
    pub(crate) quarantine: Option<Duration>,
    /// Count only durable nodes.
    #[serde(default)]
    pub(crate) require_durable: Option<bool>,
    /// A PEM file of the authorities that `rediss://` nodes' certificates must chain to,
    /// instead of the web's root authorities.
    #[serde(default)]
    pub(crate) tls_ca: Option<PathBuf>,
    /// `serve`: the API's address.
    #[serde(default)]
    pub(crate) listen: Option<SocketAddr>,
    /// `serve`: a separate address for `/metrics`.
    #[serde(default)]
    pub(crate) metrics_listen: Option<SocketAddr>,
    /// `serve`: a file holding the bearer token.
    #[serde(default)]
    pub(crate) auth_token_file: Option<PathBuf>,
    /// `serve`: allow a non-loopback address without a token.
    #[serde(default)]
    pub(crate) allow_unauthenticated: Option<bool>,
    /// `serve`: how long a client may keep the server waiting for a request, e.g. "75s".
    #[serde(default, deserialize_with = "duration")]
    pub(crate) idle_timeout: Option<Duration>,
    /// `serve`: connections open at once.
    #[serde(default)]
    pub(crate) max_connections: Option<usize>,
    /// `serve`: sessions open at once.
    #[serde(default)]
    pub(crate) max_sessions: Option<usize>,
    /// `serve`: acquires waiting at once.
    #[serde(default)]
    pub(crate) max_waiting: Option<usize>,
    /// `serve`: acquires waiting at once for one name.
    #[serde(default)]
    pub(crate) max_waiting_per_name: Option<usize>,
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let text: Option<String> = Option::deserialize(d)?;
    text.map(|t| humantime::parse_duration(&t).map_err(serde::de::Error::custom))
        .transpose()
}

impl Config {
    pub(crate) fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
        toml::from_str(&text)
            .map_err(|e| format!("config file {} is not valid: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_config_parses() {
        let path = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../redquorum.example.toml"
        ));
        let config = Config::load(path).unwrap();
        assert_eq!(config.nodes.len(), 3);
        assert!(redquorum::Client::new(config.nodes).is_ok());
        // It sets nothing the API's defaults do not already say.
        assert_eq!(config.max_ttl, None);
        assert_eq!(config.quarantine, None);
        assert_eq!(config.listen, Some("127.0.0.1:7700".parse().unwrap()));
    }

    #[test]
    fn the_idle_timeout_is_a_duration() {
        let config: Config = toml::from_str("idle_timeout = \"90s\"").unwrap();
        assert_eq!(config.idle_timeout, Some(Duration::from_secs(90)));
        assert!(toml::from_str::<Config>("idle_timeout = 90").is_err());
    }

    #[test]
    fn unknown_keys_and_bad_durations_are_refused() {
        assert!(toml::from_str::<Config>("nodez = []").is_err());
        assert!(toml::from_str::<Config>("max_ttl = \"soon\"").is_err());
        assert!(toml::from_str::<Config>("listen = \"nowhere\"").is_err());
    }
}
