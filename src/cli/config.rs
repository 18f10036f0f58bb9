//! The TOML configuration file: where the masters are, for commands not given `--nodes`.

use std::path::Path;

use serde::Deserialize;

/// The file's contents. Unknown keys are refused, so a typo does not silently do nothing.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// Node URLs.
    #[serde(default)]
    pub(crate) nodes: Vec<String>,
}

impl Config {
    pub(crate) fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
        toml::from_str(&text)
            .map_err(|e| format!("config file {} is not valid: {e}", path.display()))
    }

    pub(crate) fn nodes_or_error(self, path: &Path) -> Result<Vec<String>, String> {
        if self.nodes.is_empty() {
            Err(format!(
                "config file {} has no `nodes = [...]`",
                path.display()
            ))
        } else {
            Ok(self.nodes)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_config_parses() {
        let path = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/redquorum.example.toml"
        ));
        let nodes = Config::load(path).unwrap().nodes_or_error(path).unwrap();
        assert_eq!(nodes.len(), 3);
        assert!(redquorum::Client::new(nodes).is_ok());
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(toml::from_str::<Config>("nodez = []").is_err());
    }
}
