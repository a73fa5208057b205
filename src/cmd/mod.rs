//! One module per subcommand; each parses nothing itself and calls into `tuneplane-core`.

pub mod admin;
pub mod audit;
pub mod capsule;
#[cfg(feature = "dev")]
pub mod demo;
pub mod jobs;
pub mod keys;
pub mod logs;
pub mod output;
pub mod outputs;
pub mod pipeline;
pub mod playground;
pub mod quota;
pub mod render;
pub mod store_access;
pub mod subscriptions;
pub mod usage;
pub mod validate;

use std::path::Path;

use anyhow::Context;
use tuneplane_core::fleet::Fleet;
use tuneplane_core::spec::{Defaults, Validated, validate};

/// Reads a text file with the path in the error.
pub fn read_text(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Reads and validates a spec, printing every problem to stderr on failure.
pub fn load_spec(spec: &Path, fleet: Option<&Path>) -> anyhow::Result<Option<Validated>> {
    let text = read_text(spec)?;
    let fleet = match fleet {
        Some(p) => {
            Some(Fleet::from_yaml(&read_text(p)?).with_context(|| format!("in {}", p.display()))?)
        }
        None => None,
    };
    let shape = fleet.as_ref().map(Fleet::shape);
    match validate(&text, shape.as_ref(), &Defaults::default()) {
        Ok(v) => Ok(Some(v)),
        Err(errors) => {
            eprintln!("error: {} is not a valid job spec", spec.display());
            eprintln!("{errors}");
            Ok(None)
        }
    }
}
