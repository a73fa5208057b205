//! Harness of the console's browser tests: the `tuneplane dev` stack in-process on a free
//! loopback port, and a headless Debian Chromium driven through chromedriver (WebDriver over
//! plain HTTP on 127.0.0.1). Every wait is bounded in tries; nothing asserts on wall time.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use clap::Parser;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use tuneplane::dev::{DevArgs, Stack};

/// The arguments of `tuneplane dev`, parsed as the command line does.
#[derive(Parser)]
struct DevCli {
    #[command(flatten)]
    dev: DevArgs,
}

/// Desktop viewport.
pub const DESKTOP: (u32, u32) = (1280, 1000);
/// Time zone of the browser (India: UTC+5:30, no daylight saving time).
pub const BROWSER_TZ: &str = "Asia/Kolkata";
/// Narrow phone viewport.
pub const PHONE: (u32, u32) = (360, 1400);

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where screenshots go: `target/console-screenshots/`.
pub fn screenshot_dir() -> PathBuf {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo().join("target"), PathBuf::from);
    target.join("console-screenshots")
}

/// A running stack and a browser pointed at it.
pub struct World {
    /// The stack (`tuneplane dev` in-process).
    pub stack: Stack,
    /// The browser session.
    pub client: Client,
    driver: Driver,
    /// Holds the data dir, the browser profile and built archives.
    pub dir: tempfile::TempDir,
}

use tuneplane_testkit::free_port;

/// Polls `check` up to `tries` times, `pause` apart; panics with `what` if it never holds.
pub async fn eventually<F, Fut>(what: &str, tries: u32, pause: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..tries {
        if check().await {
            return;
        }
        tokio::time::sleep(pause).await;
    }
    panic!("gave up waiting: {what}");
}

impl World {
    /// Starts the stack (fleet `examples/fleet.yaml`, pods executed on this machine) and the browser.
    pub async fn start() -> World {
        let dir = tempfile::tempdir().expect("tempdir");
        // The options `tuneplane dev --data-dir D --port 0 --fleet examples/fleet.yaml` builds.
        let data = dir.path().join("data");
        let fleet = repo().join("examples/fleet.yaml");
        let cli = DevCli::parse_from([
            "tuneplane-dev".as_ref(),
            "--data-dir".as_ref(),
            data.as_os_str(),
            "--port".as_ref(),
            "0".as_ref(),
            "--fleet".as_ref(),
            fleet.as_os_str(),
        ] as [&std::ffi::OsStr; 7]);
        let mut opts = cli.dev.options().expect("dev options");
        opts.pass_interval = Duration::from_millis(300);
        let stack = Stack::start(opts).await.expect("stack");
        let port = free_port();
        let mut cmd = Command::new("chromedriver");
        // A time zone other than the machine's, so local-time rendering is visible and checked.
        cmd.arg(format!("--port={port}"))
            .env("TZ", BROWSER_TZ)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // Its own process group, so that ending it also ends the Chromium it started.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let driver = cmd
            .spawn()
            .expect("chromedriver (apt-get install chromium-driver)");
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        eventually(
            "chromedriver to answer",
            300,
            Duration::from_millis(100),
            || {
                let req = http.get(format!("{url}/status")).send();
                async move { req.await.is_ok_and(|r| r.status().is_success()) }
            },
        )
        .await;
        let profile = dir.path().join("chromium-profile");
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--no-proxy-server",
        ];
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        args.push(format!("--window-size={},{}", DESKTOP.0, DESKTOP.1));
        let caps = json!({"goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args}});
        let Value::Object(caps) = caps else {
            unreachable!("object literal")
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&url)
            .await
            .expect("browser session");
        World {
            stack,
            client,
            driver: Driver(driver),
            dir,
        }
    }

    /// Absolute URL of a console path.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.stack.api_url)
    }

    /// Opens `path`.
    pub async fn open(&self, path: &str) {
        self.client.goto(&self.url(path)).await.expect("goto");
    }

    /// Signs in through the form with the stack's key; lands on the jobs page.
    pub async fn sign_in(&self) {
        self.open("/console/jobs").await;
        let path = self.path().await;
        assert!(
            path.starts_with("/console/sign-in"),
            "not sent to sign in: {path}"
        );
        self.type_into("#api_key", &self.stack.api_key).await;
        self.click(".signin button[type=submit]").await;
        self.wait_for_path("the jobs page after sign-in", |p| p == "/console/jobs")
            .await;
    }

    /// Clicks the element matching `css`.
    pub async fn click(&self, css: &str) {
        self.find(css).await.click().await.unwrap();
    }

    /// Types `keys` into the element matching `css`.
    pub async fn type_into(&self, css: &str, keys: &str) {
        self.find(css).await.send_keys(keys).await.unwrap();
    }

    /// The job page's status (`data-status` of `#job-region`), if shown.
    pub async fn job_status(&self) -> Option<String> {
        self.find("#job-region")
            .await
            .attr("data-status")
            .await
            .ok()
            .flatten()
    }

    /// Waits (30 s at most) until the current path satisfies `expected`.
    pub async fn wait_for_path(&self, what: &str, expected: impl Fn(&str) -> bool) {
        eventually(what, 300, Duration::from_millis(100), || async {
            expected(&self.path().await)
        })
        .await;
    }

    /// Waits (30 s at most) until some element matching `css` has a text satisfying `expected`.
    pub async fn wait_for_text(&self, what: &str, css: &str, expected: impl Fn(&str) -> bool) {
        eventually(what, 300, Duration::from_millis(100), || async {
            self.texts(css).await.iter().any(|t| expected(t))
        })
        .await;
    }

    /// The current path (and query).
    pub async fn path(&self) -> String {
        let url = self.client.current_url().await.expect("url");
        match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        }
    }

    /// The element matching `css` (panics when absent).
    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .find(Locator::Css(css))
            .await
            .expect("find element")
    }

    /// Text of every element matching `css`.
    pub async fn texts(&self, css: &str) -> Vec<String> {
        let mut out = Vec::new();
        for e in self
            .client
            .find_all(Locator::Css(css))
            .await
            .unwrap_or_default()
        {
            out.push(e.text().await.unwrap_or_default());
        }
        out
    }

    /// Runs `script` in the page.
    pub async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.client.execute(script, args).await.expect("script")
    }

    /// Saves a screenshot as `target/console-screenshots/<name>.png`.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).expect("screenshot folder");
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    /// Screenshots of the current page at desktop and phone width (`<name>-desktop`, `<name>-360`),
    /// checking that nothing overflows sideways on the phone.
    pub async fn screenshots(&self, name: &str) {
        self.full_page_screenshot(&format!("{name}-desktop"), DESKTOP.0)
            .await;
        self.resize(PHONE.0, PHONE.1).await;
        // Everything whose right edge lies beyond the viewport (for the failure message).
        let wide = self
            .js(
                "const w = window.innerWidth; const out = [document.documentElement.scrollWidth, w];\
                 document.querySelectorAll('body *').forEach(e => { const r = e.getBoundingClientRect();\
                 if (r.right > w + 1 && out.length < 12) out.push(e.tagName + '.' + e.className + ':' + Math.round(r.right)); });\
                 return out;",
                vec![],
            )
            .await;
        let (scroll, inner) = (wide[0].as_u64().unwrap_or(0), wide[1].as_u64().unwrap_or(0));
        assert!(
            scroll <= inner,
            "{name}: page is {scroll}px wide in a {inner}px viewport: {wide}"
        );
        self.full_page_screenshot(&format!("{name}-360"), PHONE.0)
            .await;
        self.resize(DESKTOP.0, DESKTOP.1).await;
    }

    async fn resize(&self, width: u32, height: u32) {
        self.client
            .set_window_size(width, height)
            .await
            .expect("window size");
    }

    /// A screenshot of the whole page: the window grows to the page's height (bounded).
    async fn full_page_screenshot(&self, name: &str, width: u32) {
        let height = self
            .js("return document.documentElement.scrollHeight;", vec![])
            .await
            .as_u64()
            .unwrap_or(1000)
            .clamp(600, 4000);
        self.resize(width, u32::try_from(height).unwrap_or(1000))
            .await;
        self.screenshot(name).await;
    }

    /// Ends the browser session, chromedriver and the stack.
    pub async fn finish(self) {
        let _ = self.client.clone().close().await;
        drop(self.driver);
        self.stack.shutdown().await;
    }
}

/// The chromedriver process; ended (with the Chromium it started) when dropped, even when a
/// test panics.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            // Only the process group this harness started.
            let group = format!("-{}", self.0.id());
            let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
            let _ = self.0.wait();
        }
    }
}

/// A `.tar.gz` of the files of `dir` (not its spec), written beside the world's data.
pub fn archive_of(dir: &Path, out: &Path) -> PathBuf {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    names.sort();
    for path in names
        .iter()
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "py"))
    {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        b.append_path_with_name(path, name).unwrap();
    }
    let bytes = b.into_inner().and_then(|g| g.finish()).unwrap();
    std::fs::write(out, bytes).unwrap();
    out.to_path_buf()
}
