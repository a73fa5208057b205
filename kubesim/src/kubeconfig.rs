//! A kubeconfig pointing at a running simulator (plain HTTP on loopback, no credentials), for
//! kubectl and for kube-rs clients that read `KUBECONFIG`.

use std::path::Path;

use crate::error::{Error, Result};

/// Name of the cluster, user and context in written kubeconfigs.
pub const CONTEXT: &str = "kubesim";

/// The kubeconfig YAML for a server URL and default namespace.
pub fn render(server: &str, namespace: &str) -> String {
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: {CONTEXT}\n  cluster:\n    server: {server}\n\
         users:\n\
         - name: {CONTEXT}\n  user: {{}}\n\
         contexts:\n\
         - name: {CONTEXT}\n  context:\n    cluster: {CONTEXT}\n    user: {CONTEXT}\n    namespace: {namespace}\n\
         current-context: {CONTEXT}\n\
         preferences: {{}}\n"
    )
}

/// Writes the kubeconfig to `path`, creating parent directories.
pub fn write(path: &Path, server: &str, namespace: &str) -> Result<()> {
    let err = |source| Error::Write {
        path: path.display().to_string(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    std::fs::write(path, render(server, namespace)).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_is_valid_yaml_with_the_server() {
        let text = render("http://127.0.0.1:6443", "default");
        let doc: serde_json::Value = yaml_serde::from_str(&text).unwrap_or_default();
        assert_eq!(
            doc["clusters"][0]["cluster"]["server"],
            "http://127.0.0.1:6443"
        );
        assert_eq!(doc["current-context"], "kubesim");
        assert_eq!(doc["contexts"][0]["context"]["namespace"], "default");
    }
}
