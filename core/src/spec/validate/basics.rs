//! The job's image, environment and labels.

use super::*;

impl Checker {
    pub(super) fn image(&mut self, image: &str) {
        let ok = !image.is_empty()
            && image.len() <= 512
            && !image.starts_with('-')
            && image.chars().all(|c| c.is_ascii_graphic());
        if !ok {
            self.err(
                "image",
                format!(
                    "{image:?} is not a container image reference (e.g. ghcr.io/acme/train:1.2)"
                ),
            );
        }
    }

    pub(super) fn env(&mut self, env: &BTreeMap<String, String>) {
        if env.len() > MAX_ENV {
            self.err(
                "env",
                format!("has {} variables; at most {MAX_ENV} are allowed", env.len()),
            );
        }
        let mut total = 0;
        for (k, v) in env {
            total += k.len() + v.len();
            let valid = k
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                self.err(format!("env.{k}"), "is not a valid variable name (letters, digits, '_', not starting with a digit)");
            } else if k.starts_with(RESERVED_ENV_PREFIX) {
                self.err(
                    format!("env.{k}"),
                    format!(
                        "names starting with {RESERVED_ENV_PREFIX} are reserved for the platform"
                    ),
                );
            }
            if v.contains('\0') {
                self.err(format!("env.{k}"), "value must not contain NUL bytes");
            }
        }
        if total > 32 * 1024 {
            self.err(
                "env",
                "is larger than 32 KiB in total; pass large data in files instead",
            );
        }
    }

    pub(super) fn labels(&mut self, labels: &BTreeMap<String, String>) {
        if labels.len() > MAX_LABELS {
            self.err(
                "labels",
                format!(
                    "has {} labels; at most {MAX_LABELS} are allowed",
                    labels.len()
                ),
            );
        }
        for (k, v) in labels {
            let path = format!("labels.{k}");
            if let Some(why) = crate::constants::reserved_label(k) {
                self.err(&path, why);
            } else if !is_label_key(k) {
                self.err(&path, "is not a valid Kubernetes label key ([prefix/]name, name of at most 63 characters)");
            }
            if !is_label_value(v) {
                self.err(&path, format!("value {v:?} is not a valid Kubernetes label value (at most 63 of letters, digits, '-', '_', '.', starting and ending alphanumeric)"));
            }
        }
    }
}
