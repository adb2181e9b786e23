//! A TOML config file (`--config FILE`), read and parsed once: its `[recipe]` table
//! (TransformerEngine's field names), its `[[gemms]]` per-GEMM granularity entries and its
//! `[train]` table ([`crate::train::TrainSettings`]). Anything else in the file is an error,
//! so a typo is not a silent default. Every message names the file.
//!
//! ```toml
//! [recipe]
//! kind = "delayed"            # or any --recipe name: current, rowwise, block, mxfp8, TE's classes
//! amax_history_len = 16
//!
//! [[gemms]]
//! match = "*mlp*"
//! granularity = "block"
//!
//! [train]
//! lr = 3e-3
//! ```

use crate::error::{Context, Error, Result, bail};
use crate::options::{parse_granularity, recipe_name};
use crate::train::TrainSettings;
use fp8c_core::{CurrentScaling, Granularity, Recipe};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// A parsed config file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConfigFile {
    /// Where it was read from (messages name it); empty for text parsed in memory.
    pub path: PathBuf,
    /// The `[recipe]` table, if the file has one.
    pub recipe: Option<Recipe>,
    /// The name the `[recipe]` table's `kind` gave, as written (`rowwise_with_gw_hp`, ...).
    pub recipe_kind: Option<String>,
    /// The `[[gemms]]` entries, in order: GEMMs whose node name matches the glob use the
    /// granularity under current scaling; the first match wins.
    pub gemms: Vec<(String, Granularity)>,
    /// The `[train]` table, if the file has one.
    pub train: Option<TrainSettings>,
}

/// The tables a config file may hold.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Tables {
    recipe: Option<Recipe>,
    train: Option<TrainSettings>,
    #[serde(default)]
    gemms: Vec<GemmGranularity>,
}

/// One `[[gemms]]` entry.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GemmGranularity {
    #[serde(rename = "match")]
    pattern: String,
    granularity: String,
}

impl ConfigFile {
    /// Reads and parses the config file at `path` (a regular file of at most 1 MiB).
    pub fn read(path: &Path) -> Result<ConfigFile> {
        let text = read_config_text(path)?;
        let mut cfg = ConfigFile::parse(&text)
            .with_context(|| format!("{}: invalid config", path.display()))?;
        cfg.path = path.to_path_buf();
        Ok(cfg)
    }

    /// Parses a config file's text.
    pub fn parse(text: &str) -> Result<ConfigFile> {
        let mut table: toml::Table = toml::from_str(text).map_err(Error::invalid)?;
        // `kind` may be any name `--recipe` takes (TE's class names, torchao's recipe names):
        // the per-tile ones become `current` with their granularity and power-of-two scales,
        // unless the table sets those fields itself.
        let mut recipe_kind = None;
        if let Some(toml::Value::Table(r)) = table.get_mut("recipe")
            && let Some(toml::Value::String(name)) = r.get("kind").cloned()
        {
            let (kind, granularity) =
                recipe_name(&name).with_context(|| format!("[recipe] kind = \"{name}\""))?;
            r.insert("kind".into(), toml::Value::String(kind.into()));
            if let Some(g) = granularity {
                r.entry("granularity")
                    .or_insert_with(|| toml::Value::String(g.name().into()));
                r.entry("power_2_scale")
                    .or_insert(toml::Value::Boolean(CurrentScaling::tiled(g).power_2_scale));
            }
            recipe_kind = Some(name);
        }
        let tables: Tables = table.try_into().map_err(Error::invalid)?;
        let gemms = tables
            .gemms
            .into_iter()
            .map(|e| {
                let g = parse_granularity(&e.granularity)
                    .with_context(|| format!("[[gemms]] match = \"{}\"", e.pattern))?;
                Ok((e.pattern, g))
            })
            .collect::<Result<_>>()?;
        Ok(ConfigFile {
            path: PathBuf::new(),
            recipe: tables.recipe,
            recipe_kind,
            gemms,
            train: tables.train,
        })
    }

    /// `FILE: ` for messages about this file (nothing for text parsed in memory).
    pub fn prefix(&self) -> String {
        if self.path.as_os_str().is_empty() {
            String::new()
        } else {
            format!("{}: ", self.path.display())
        }
    }
}

/// The text of a config file: a regular file of at most 1 MiB.
fn read_config_text(path: &Path) -> Result<String> {
    use std::io::Read;
    let f = crate::npy::open_regular(path)?;
    let mut text = String::new();
    // A config is a few lines; more than 1 MiB is not one.
    f.take(1 << 20)
        .read_to_string(&mut text)
        .map_err(|e| Error::io(format_args!("{}: cannot read", path.display()), e))?;
    if text.len() == 1 << 20 {
        bail!("{}: more than 1 MiB; not a config file", path.display());
    }
    Ok(text)
}

/// Parses the text of a TOML config file; its `[recipe]` table, if any.
pub fn parse_recipe_config(text: &str) -> Result<Option<Recipe>> {
    Ok(ConfigFile::parse(text)?.recipe)
}
