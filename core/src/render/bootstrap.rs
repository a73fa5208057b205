//! The shell + Python snippets workloads run before user code: download the capsule, verify its
//! SHA-256 *before* anything is unpacked, and (for CPU Pods) extract it safely and start the runner.
//!
//! They need only the image's Bash and Python 3 (like the runner). The URL and the expected hash come
//! through environment variables ([`URL_ENV`], [`SHA_ENV`]), never interpolated into the script, so
//! a URL cannot inject shell code.

/// Environment variable carrying the capsule URL.
pub const URL_ENV: &str = "TUNEPLANE_CAPSULE_URL";
/// Environment variable carrying the capsule's expected SHA-256.
pub const SHA_ENV: &str = "TUNEPLANE_CAPSULE_SHA256";
/// Exit status when the capsule does not match its hash.
pub const MISMATCH_EXIT: i32 = 86;
/// Exit status when the capsule cannot be downloaded (the fetch names the endpoint and its answer).
pub const FETCH_FAILED_EXIT: i32 = 87;
/// What the fetch scripts print when the capsule cannot be downloaded.
pub const FETCH_FAILED_TEXT: &str = "capsule download failed";
/// Name of the Ray pods' init container that fetches and verifies the capsule.
pub const FETCH_CONTAINER: &str = "fetch-capsule";
/// What the fetch scripts and the runner print when a capsule does not match.
pub const MISMATCH_TEXT: &str = "capsule checksum mismatch";
/// Shared folder of Ray pods' capsules (init-container delivery).
pub const RAY_CAPSULE_DIR: &str = "/tuneplane/capsule";
/// Working folder of CPU Pods.
pub const POD_WORK_DIR: &str = "/tuneplane/work";

const FETCH_PY: &str = r#"import hashlib, os, sys, urllib.error, urllib.request
url, want, dest = os.environ["TUNEPLANE_CAPSULE_URL"], os.environ["TUNEPLANE_CAPSULE_SHA256"], sys.argv[1]
os.makedirs(os.path.dirname(dest), exist_ok=True)
tmp = dest + ".part"
h = hashlib.sha256()
where = url.split("?", 1)[0]
try:
    with urllib.request.urlopen(url, timeout=300) as r, open(tmp, "wb") as f:
        while True:
            chunk = r.read(1 << 20)
            if not chunk:
                break
            h.update(chunk)
            f.write(chunk)
except Exception as e:
    if isinstance(e, urllib.error.HTTPError):
        said = "it answered HTTP %d %s" % (e.code, e.reason)
    else:
        said = "%s" % (getattr(e, "reason", None) or e)
    sys.stderr.write("tuneplane: capsule download failed: %s: %s; nothing was executed\n" % (where, said))
    sys.exit(87)
got = h.hexdigest()
if got != want:
    os.remove(tmp)
    sys.stderr.write("tuneplane: capsule checksum mismatch: expected %s, got %s; nothing was executed\n" % (want, got))
    sys.exit(86)
os.replace(tmp, dest)
print("tuneplane: capsule %s verified" % got)
"#;

const EXTRACT_PY: &str = r#"import os, stat, sys, zipfile
src, root = sys.argv[1], os.path.realpath(sys.argv[2])
os.makedirs(root, exist_ok=True)
with zipfile.ZipFile(src) as z:
    for info in z.infolist():
        name = info.filename
        target = os.path.realpath(os.path.join(root, name))
        mode = info.external_attr >> 16
        if os.path.isabs(name) or not (target == root or target.startswith(root + os.sep)):
            sys.exit("tuneplane: unsafe path in capsule: %r" % name)
        if stat.S_ISLNK(mode):
            sys.exit("tuneplane: symlink in capsule: %r" % name)
        z.extract(info, root)
        if mode & 0o111 and not name.endswith("/"):
            os.chmod(target, 0o755)
os.remove(src)
"#;

/// Script of the Ray init container: fetch + verify to `/tuneplane/capsule/<sha>/capsule.zip`.
pub fn ray_fetch_script(sha256: &str) -> String {
    format!(
        "set -euo pipefail\nPY=$(command -v python3 || command -v python)\n\"$PY\" - {dir}/{sha256}/capsule.zip <<'TUNEPLANE_PY'\n{FETCH_PY}TUNEPLANE_PY\n",
        dir = RAY_CAPSULE_DIR
    )
}

/// Recovers a CPU Pod's grant from its sealed form and its tenant's seal key (the same key stream
/// as `crate::grant::SealKey::seal`) and prints it; the key and the sealed text come from the
/// environment, never from the script.
const UNSEAL_PY: &str = r#"import hashlib, hmac, os, sys
key = bytes.fromhex(os.environ["TUNEPLANE_GRANT_SEAL_KEY"].strip())
sealed = bytes.fromhex(os.environ["TUNEPLANE_GRANT_SEALED"])
label = "tuneplane-grant-seal-v1\n%s\n%s\n" % (os.environ["TUNEPLANE_JOB_ID"], os.environ["TUNEPLANE_ATTEMPT"])
stream, block = b"", 0
while len(stream) < len(sealed):
    stream += hmac.new(key, (label + str(block)).encode(), hashlib.sha256).digest()
    block += 1
sys.stdout.write(bytes(a ^ b for a, b in zip(sealed, stream)).decode("ascii"))
"#;

/// The bootstrap lines that turn the sealed grant into `TUNEPLANE_GRANT` for the runner (which
/// keeps it from the entrypoint) and drop the sealed text and the seal key from the environment.
fn unseal_lines() -> String {
    format!(
        "TUNEPLANE_GRANT=$(\"$PY\" - <<'TUNEPLANE_PY'\n{UNSEAL_PY}TUNEPLANE_PY\n)\n\
         export TUNEPLANE_GRANT\nunset TUNEPLANE_GRANT_SEALED TUNEPLANE_GRANT_SEAL_KEY\n"
    )
}

/// Script of a CPU Pod: fetch + verify, extract safely, run the platform runner in the capsule
/// root; with `sealed`, the Pod's grant is unsealed for the runner first.
pub fn pod_bootstrap_script(sealed: bool) -> String {
    let unseal = if sealed {
        unseal_lines()
    } else {
        String::new()
    };
    format!(
        "set -euo pipefail\nPY=$(command -v python3 || command -v python)\n\
         \"$PY\" - {work}/capsule.zip <<'TUNEPLANE_PY'\n{FETCH_PY}TUNEPLANE_PY\n\
         \"$PY\" - {work}/capsule.zip {work}/root <<'TUNEPLANE_PY'\n{EXTRACT_PY}TUNEPLANE_PY\n\
         {unseal}cd {work}/root\nexec \"$PY\" .tuneplane/runner.pex\n",
        work = POD_WORK_DIR
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_verify_before_extracting_and_take_the_url_from_the_environment() {
        let script = pod_bootstrap_script(false);
        let verify = script.find("hexdigest").unwrap_or(usize::MAX);
        let extract = script.find("zipfile.ZipFile").unwrap_or(0);
        assert!(verify < extract, "hash checked before extraction");
        assert!(script.contains("os.environ[\"TUNEPLANE_CAPSULE_URL\"]"));
        assert!(script.ends_with("exec \"$PY\" .tuneplane/runner.pex\n"));
        assert!(ray_fetch_script("ab").contains("/tuneplane/capsule/ab/capsule.zip"));
        assert!(!script.contains("TUNEPLANE_GRANT"));
        let sealed = pod_bootstrap_script(true);
        let unseal = sealed.find("TUNEPLANE_GRANT=$(").unwrap_or(usize::MAX);
        assert!(sealed.find("zipfile.ZipFile").unwrap_or(0) < unseal);
        assert!(
            unseal
                < sealed
                    .find("exec \"$PY\" .tuneplane/runner.pex")
                    .unwrap_or(0)
        );
    }

    /// Whether `python3` runs here (the tests that run the real script need it).
    fn python3() -> bool {
        let status = std::process::Command::new("python3")
            .args(["-c", "1"])
            .status();
        status.is_ok_and(|s| s.success())
    }

    #[test]
    fn the_bootstrap_unseals_the_grant_the_reconciler_sealed_and_drops_the_key() {
        // Runs the real unseal lines with python3 when available.
        if !python3() {
            return;
        }
        let key = crate::grant::GrantKey::parse(&"5a".repeat(32)).unwrap();
        let token = key.token("job-7", 3);
        let seal = key.seal_key("jobs", "acme");
        let script = format!(
            "set -euo pipefail\nPY=python3\n{}printf '%s|%s|%s' \"$TUNEPLANE_GRANT\" \"${{TUNEPLANE_GRANT_SEAL_KEY:-gone}}\" \"${{TUNEPLANE_GRANT_SEALED:-gone}}\"\n",
            unseal_lines()
        );
        let run = |seal_hex: String| {
            std::process::Command::new("bash")
                .arg("-c")
                .arg(&script)
                .env("TUNEPLANE_JOB_ID", "job-7")
                .env("TUNEPLANE_ATTEMPT", "3")
                .env("TUNEPLANE_GRANT_SEALED", seal.seal("job-7", 3, &token))
                .env("TUNEPLANE_GRANT_SEAL_KEY", seal_hex)
                .output()
                .unwrap()
        };
        let out = run(seal.to_hex());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{token}|gone|gone")
        );
        // Another tenant's key recovers no valid grant (or fails to decode, which stops the pod).
        let other = run(key.seal_key("jobs", "globex").to_hex());
        let got = String::from_utf8_lossy(&other.stdout).to_string();
        let recovered = got.split('|').next().unwrap_or_default();
        assert!(!other.status.success() || key.verify("job-7", recovered).is_none());
    }

    #[test]
    fn a_capsule_that_cannot_be_downloaded_is_named_with_what_answered_and_no_traceback() {
        if !python3() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        // A loopback port nothing listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let script =
            ray_fetch_script("00").replace(RAY_CAPSULE_DIR, &dir.path().display().to_string());
        let run = |url: String| {
            std::process::Command::new("bash")
                .arg("-c")
                .arg(&script)
                .env(URL_ENV, url)
                .env(SHA_ENV, "0".repeat(64))
                .output()
                .unwrap()
        };
        let out = run(format!(
            "http://127.0.0.1:{port}/blobs/capsules/x?sig=secret"
        ));
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(FETCH_FAILED_EXIT), "{err}");
        assert!(
            err.contains(&format!(
                "{FETCH_FAILED_TEXT}: http://127.0.0.1:{port}/blobs/capsules/x: "
            )) && err.contains("refused"),
            "{err}"
        );
        assert!(
            !err.contains("Traceback") && !err.contains("secret"),
            "{err}"
        );
        // A missing file answers as such (file:// stands in for an HTTP 404 here).
        let out = run(format!("file://{}/missing.zip", dir.path().display()));
        assert_eq!(out.status.code(), Some(FETCH_FAILED_EXIT));
    }

    #[test]
    fn bootstrap_refuses_a_tampered_capsule_and_runs_nothing() {
        // Runs the real script with python3 when available, against a file:// URL.
        if !python3() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let zip = dir.path().join("c.zip");
        std::fs::write(&zip, b"not the capsule").unwrap();
        let script =
            ray_fetch_script("00").replace(RAY_CAPSULE_DIR, &dir.path().display().to_string());
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(&script)
            .env(URL_ENV, format!("file://{}", zip.display()))
            .env(SHA_ENV, "0".repeat(64))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(MISMATCH_EXIT));
        assert!(String::from_utf8_lossy(&out.stderr).contains("checksum mismatch"));
        assert!(!dir.path().join("00/capsule.zip").exists());
    }
}
