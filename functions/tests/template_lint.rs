//! `template.yaml` checks: cfn-lint on the SAM template and on its offline aws-sam-translator
//! transform (which catches more, e.g. IAM actions that do not exist), then structural checks of
//! the transformed template against what the code expects (table keys, indexes, TTL, runtimes,
//! configuration variables).
//!
//! The tools come from the repository venv (`scripts/bootstrap-venv.sh`, run by `scripts/test.sh`);
//! without it these tests fail with that instruction instead of passing silently.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod venv;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tuneplane_functions::config;
use venv::root;

/// A pinned template tool of the venv.
fn tool(name: &str) -> PathBuf {
    venv::venv_tool(name, "the pinned template tools")
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run the linter");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

fn transformed(dir: &Path) -> PathBuf {
    let out = dir.join("template.transformed.json");
    run(Command::new(tool("python"))
        .arg(root().join("functions/tests/template/sam_transform.py"))
        .arg(root().join("template.yaml"))
        .arg(&out));
    out
}

#[test]
fn cfn_lint_passes_on_the_sam_template() {
    run(Command::new(tool("cfn-lint")).arg(root().join("template.yaml")));
}

#[test]
fn cfn_lint_passes_on_the_offline_sam_transform() {
    let dir = tempfile::tempdir().unwrap();
    let out = transformed(dir.path());
    run(Command::new(tool("cfn-lint")).arg(&out));
}

#[test]
fn transformed_template_matches_what_the_code_expects() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(transformed(dir.path())).unwrap_or_default();
    let doc: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let resources = &doc["Resources"];

    let table = &resources["JobsTable"]["Properties"];
    let keys: Vec<&str> = table["KeySchema"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|k| k["AttributeName"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(keys, ["pk", "sk"]);
    let indexes: Vec<&str> = table["GlobalSecondaryIndexes"]
        .as_array()
        .map(|a| a.iter().filter_map(|i| i["IndexName"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(indexes, ["active", "tenant"]);
    assert_eq!(table["TimeToLiveSpecification"]["AttributeName"], "ttl");

    let known = [
        config::ENV_TABLE,
        config::ENV_BUCKET,
        config::ENV_WEBHOOKS,
        config::ENV_NAMESPACE,
        config::ENV_PRE_RUNNING,
        config::ENV_RUN,
        config::ENV_SCRATCH,
        config::ENV_LOG_FORMAT,
        config::ENV_EVENT_SENDERS,
        config::ENV_TENANT_NAMESPACES,
        config::ENV_DEFAULT_QUOTA,
        config::ENV_PLAYGROUND_POD_CIDRS,
        config::ENV_RATE_LIMIT_PER_KEY,
        config::ENV_RATE_LIMIT_PER_SOURCE,
        config::ENV_GRANT_KEY,
        tuneplane_functions::console::session::ENV_CONSOLE_SECRET,
    ];
    let mut functions = 0;
    for (name, resource) in resources.as_object().into_iter().flatten() {
        if resource["Type"] != "AWS::Lambda::Function" {
            continue;
        }
        functions += 1;
        let props = &resource["Properties"];
        assert_eq!(props["Runtime"], "provided.al2023", "{name}");
        assert_eq!(
            props["Architectures"],
            serde_json::json!(["arm64"]),
            "{name}"
        );
        for var in props["Environment"]["Variables"]
            .as_object()
            .into_iter()
            .flatten()
        {
            assert!(
                known.contains(&var.0.as_str()),
                "{name}: unknown variable {}",
                var.0
            );
        }
    }
    assert_eq!(functions, 3);
    // Submission events: only our own source reaches the inbox function.
    let rules: Vec<&Value> = resources
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, r)| r["Type"] == "AWS::Events::Rule")
        .map(|(_, r)| &r["Properties"]["EventPattern"])
        .filter(|p| p["detail-type"] == serde_json::json!(["TunePlane Job Submission"]))
        .collect();
    assert_eq!(rules.len(), 1, "one submission rule");
    assert_eq!(rules[0]["source"], serde_json::json!(["tuneplane.jobs"]));
    let bucket = &resources["Bucket"]["Properties"];
    let block = &bucket["PublicAccessBlockConfiguration"];
    for flag in [
        "BlockPublicAcls",
        "BlockPublicPolicy",
        "IgnorePublicAcls",
        "RestrictPublicBuckets",
    ] {
        assert_eq!(block[flag], true, "{flag}");
    }
}

/// `sam build` builds each function with cargo-lambda in its `CodeUri`: that folder must be the
/// functions package (the workspace root is the CLI, which has no `api` binary) and each
/// `Binary` one of its `[[bin]]` targets.
#[test]
fn every_function_builds_a_binary_of_the_functions_package() {
    let text = std::fs::read_to_string(root().join("template.yaml")).expect("template.yaml");
    // CloudFormation tags (!Ref, !Sub, !GetAtt) are not YAML the parser knows; blank them.
    let plain: String = text
        .lines()
        .map(|l| {
            l.replace("!Ref ", "")
                .replace("!Sub ", "")
                .replace("!GetAtt ", "")
        })
        .collect::<Vec<_>>()
        .join("\n");
    let template: Value = yaml_serde::from_str(&plain).unwrap();
    let manifest =
        std::fs::read_to_string(root().join("functions/Cargo.toml")).expect("functions/Cargo.toml");
    let mut seen = 0;
    for (name, resource) in template["Resources"].as_object().into_iter().flatten() {
        if resource["Type"] != "AWS::Serverless::Function" {
            continue;
        }
        seen += 1;
        assert_eq!(resource["Properties"]["CodeUri"], "functions/", "{name}");
        assert_eq!(
            resource["Metadata"]["BuildMethod"], "rust-cargolambda",
            "{name}"
        );
        let binary = resource["Metadata"]["BuildProperties"]["Binary"]
            .as_str()
            .unwrap_or_default();
        assert!(
            manifest.contains(&format!("[[bin]]\nname = \"{binary}\"")),
            "{name}: functions/Cargo.toml has no binary {binary:?}"
        );
    }
    assert_eq!(seen, 3);
}
