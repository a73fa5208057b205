//! The `tuneplane` command-line interface as a library: its commands, the API client and the
//! one-machine stack (`tuneplane dev` / `tuneplane demo`), so end-to-end tests can start the same
//! stack in-process that users start from the command line. The stack is the `dev` feature (on by
//! default); without it the CLI is a client only, with neither kubesim nor the reconciler.

pub mod client;
pub mod cmd;
#[cfg(feature = "dev")]
pub mod dev;
pub mod examples;
pub mod term;

#[cfg(test)]
mod repository {
    /// `make help` names every script in `scripts/`: a script added without its line fails here.
    #[test]
    fn make_help_lists_every_script() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let makefile = std::fs::read_to_string(root.join("Makefile")).unwrap_or_default();
        let help = makefile.split("\nhelp:").nth(1).unwrap_or_default();
        let mut scripts: Vec<String> = std::fs::read_dir(root.join("scripts"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        scripts.sort();
        assert!(scripts.len() >= 10, "{scripts:?}");
        let missing: Vec<&String> = scripts
            .iter()
            .filter(|s| !help.contains(&format!("scripts/{s} ")))
            .collect();
        assert!(missing.is_empty(), "not in make help: {missing:?}");
    }
}
