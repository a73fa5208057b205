//! A loopback HTTP/1.1 fault proxy in front of the local moto endpoint (DynamoDB + S3): listens on
//! 127.0.0.1:0, forwards each request to the upstream and, from a seeded sequence of draws, answers
//! some with a throttling or server error in the service's own format (DynamoDB JSON with `__type`,
//! S3 XML), drops the connection before forwarding, drops it after the upstream applied the request
//! (the response is lost), or delays the request. Every response carries `Connection: close`, so one
//! connection holds one request and a dropped connection loses exactly one request.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tuneplane_kubesim::SplitMix64;

/// What the proxy did to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProxyFault {
    /// Answered without forwarding: DynamoDB `400 ThrottlingException`, S3 `503 SlowDown`.
    Throttle,
    /// Answered without forwarding: `500 InternalServerError` / `InternalError`.
    ServerError,
    /// Closed the connection without forwarding or answering.
    DropBefore,
    /// Forwarded (the upstream applied it), then closed without answering.
    DropAfter,
    /// Waited a little, then forwarded normally.
    Delay,
    /// Answered like [`ProxyFault::Throttle`] because the outage switch is on.
    Outage,
}

/// Fractions of requests that get each fault (the rest are forwarded untouched).
#[derive(Debug, Clone, Copy)]
pub struct ProxyPlan {
    /// Seed of the draws.
    pub seed: u64,
    /// Throttling answers.
    pub throttle: f64,
    /// Server-error answers.
    pub server_error: f64,
    /// Connections dropped before forwarding.
    pub drop_before: f64,
    /// Connections dropped after forwarding.
    pub drop_after: f64,
    /// Delayed requests.
    pub delay: f64,
    /// The longest delay.
    pub max_delay: Duration,
}

impl ProxyPlan {
    /// No random faults (scripted ones only, see [`FaultProxy::fail_next`]).
    pub fn none() -> ProxyPlan {
        ProxyPlan {
            seed: 0,
            throttle: 0.0,
            server_error: 0.0,
            drop_before: 0.0,
            drop_after: 0.0,
            delay: 0.0,
            max_delay: Duration::ZERO,
        }
    }
}

/// Counters of a running proxy.
#[derive(Debug, Default)]
pub struct ProxyStats {
    requests: Mutex<BTreeMap<&'static str, u64>>,
    faults: Mutex<BTreeMap<(ProxyFault, String), u64>>,
    broken: Mutex<Vec<String>>,
}

impl ProxyStats {
    /// Requests received by service (`dynamodb`, `s3`).
    pub fn requests(&self) -> BTreeMap<&'static str, u64> {
        self.requests.lock().map(|m| m.clone()).unwrap_or_default()
    }
    /// Faults injected by kind and operation (`dynamodb UpdateItem`, `s3 PUT`).
    pub fn faults(&self) -> BTreeMap<(ProxyFault, String), u64> {
        self.faults.lock().map(|m| m.clone()).unwrap_or_default()
    }
    /// Faults of one kind over both services.
    pub fn faults_of(&self, kind: ProxyFault) -> u64 {
        self.faults()
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|(_, n)| n)
            .sum()
    }
    /// Requests the proxy itself could not handle (malformed, upstream unreachable).
    pub fn broken(&self) -> Vec<String> {
        self.broken.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// A running proxy; dropping it stops accepting connections.
pub struct FaultProxy {
    /// The proxy's address (127.0.0.1).
    pub addr: SocketAddr,
    /// Its counters.
    pub stats: Arc<ProxyStats>,
    enabled: Arc<AtomicBool>,
    outage: Arc<AtomicBool>,
    switches: Arc<Switches>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// The endpoint URL to give an SDK client.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Turns fault injection on or off (requests are forwarded either way).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::SeqCst);
    }

    /// Gives the next `n` requests `fault` (before any random draw).
    pub fn fail_next(&self, fault: ProxyFault, n: u64) {
        if let Ok(mut next) = self.switches.next.lock() {
            *next = (n > 0).then_some((fault, n));
        }
    }

    /// Starts or ends an outage: every request is answered as throttled, none is forwarded.
    pub fn set_outage(&self, on: bool) {
        self.outage.store(on, Ordering::SeqCst);
    }

    /// Starts a proxy to `upstream` (`127.0.0.1:PORT`) with `plan`.
    pub async fn start(upstream: SocketAddr, plan: ProxyPlan) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy bind");
        let addr = listener.local_addr().expect("proxy addr");
        let stats = Arc::new(ProxyStats::default());
        let enabled = Arc::new(AtomicBool::new(true));
        let outage = Arc::new(AtomicBool::new(false));
        let switches = Arc::new(Switches {
            enabled: enabled.clone(),
            outage: outage.clone(),
            rng: Mutex::new(SplitMix64::new(plan.seed)),
            next: Mutex::new(None),
        });
        let (s, sw) = (stats.clone(), switches.clone());
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let (s, sw) = (s.clone(), sw.clone());
                tokio::spawn(async move {
                    if let Err(e) = serve(conn, upstream, plan, &s, &sw).await
                        && let Ok(mut b) = s.broken.lock()
                    {
                        b.push(e.to_string());
                    }
                });
            }
        });
        FaultProxy {
            addr,
            stats,
            enabled,
            outage,
            switches,
            task,
        }
    }
}

/// The proxy's switches and its draws.
struct Switches {
    enabled: Arc<AtomicBool>,
    outage: Arc<AtomicBool>,
    rng: Mutex<SplitMix64>,
    /// A fault for the next few requests, and how many are left.
    next: Mutex<Option<(ProxyFault, u64)>>,
}

impl Switches {
    fn take_next(&self) -> Option<ProxyFault> {
        let mut next = self.next.lock().ok()?;
        let (fault, left) = next.as_mut()?;
        let fault = *fault;
        *left -= 1;
        if *left == 0 {
            *next = None;
        }
        Some(fault)
    }
}

/// One parsed HTTP/1.1 message: the head's lines and the raw body.
struct Message {
    start: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Message {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The message with `Connection: close` (and without `Expect`), framed by Content-Length.
    fn encode(&self) -> Vec<u8> {
        let mut out = format!("{}\r\n", self.start);
        let chunked = self.header("transfer-encoding").is_some();
        let skip = ["connection", "keep-alive", "expect", "transfer-encoding"];
        for (n, v) in &self.headers {
            if skip.iter().any(|s| n.eq_ignore_ascii_case(s)) {
                continue;
            }
            // A de-chunked body is re-framed below; a HEAD answer keeps its length, bodiless.
            if chunked && n.eq_ignore_ascii_case("content-length") {
                continue;
            }
            out.push_str(&format!("{n}: {v}\r\n"));
        }
        if chunked || (self.header("content-length").is_none() && !self.body.is_empty()) {
            out.push_str(&format!("content-length: {}\r\n", self.body.len()));
        }
        out.push_str("connection: close\r\n\r\n");
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

type IoResult<T> = std::io::Result<T>;

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned())
}

/// A buffered reader of HTTP/1.1 framing over a stream.
struct Reader<'a> {
    conn: &'a mut TcpStream,
    buf: Vec<u8>,
}

impl Reader<'_> {
    async fn fill(&mut self) -> IoResult<bool> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.conn.read(&mut chunk).await?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n > 0)
    }

    async fn line(&mut self) -> IoResult<String> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..i + 2).take(i).collect();
                return String::from_utf8(line).map_err(|_| bad("non-UTF-8 line"));
            }
            if !self.fill().await? {
                return Err(bad("connection closed mid-line"));
            }
        }
    }

    async fn exact(&mut self, n: usize) -> IoResult<Vec<u8>> {
        while self.buf.len() < n {
            if !self.fill().await? {
                return Err(bad("connection closed mid-body"));
            }
        }
        Ok(self.buf.drain(..n).collect())
    }

    /// Reads a head; `None` on a clean close before any byte.
    async fn head(&mut self) -> IoResult<Option<(String, Vec<(String, String)>)>> {
        if self.buf.is_empty() && !self.fill().await? {
            return Ok(None);
        }
        let start = self.line().await?;
        let mut headers = Vec::new();
        loop {
            let line = self.line().await?;
            if line.is_empty() {
                break;
            }
            let (n, v) = line.split_once(':').ok_or_else(|| bad("bad header"))?;
            headers.push((n.trim().to_owned(), v.trim().to_owned()));
        }
        Ok(Some((start, headers)))
    }

    /// Reads a body framed by `headers` (`None` length: read to the end of the stream).
    async fn body(&mut self, msg: &mut Message, to_eof: bool) -> IoResult<()> {
        let chunked = msg
            .header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        if chunked {
            loop {
                let size_line = self.line().await?;
                let size =
                    usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
                        .map_err(|_| bad("bad chunk size"))?;
                if size == 0 {
                    while !self.line().await?.is_empty() {}
                    return Ok(());
                }
                let data = self.exact(size).await?;
                msg.body.extend_from_slice(&data);
                self.exact(2).await?;
            }
        }
        if let Some(len) = msg.header("content-length") {
            let len: usize = len.parse().map_err(|_| bad("bad content-length"))?;
            msg.body = self.exact(len).await?;
        } else if to_eof {
            while self.fill().await? {}
            msg.body = std::mem::take(&mut self.buf);
        }
        Ok(())
    }
}

async fn read_request(conn: &mut TcpStream) -> IoResult<Option<Message>> {
    let mut r = Reader {
        conn,
        buf: Vec::new(),
    };
    let Some((start, headers)) = r.head().await? else {
        return Ok(None);
    };
    let mut msg = Message {
        start,
        headers,
        body: Vec::new(),
    };
    if msg
        .header("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    {
        r.conn.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
    }
    r.body(&mut msg, false).await?;
    Ok(Some(msg))
}

async fn forward(upstream: SocketAddr, req: &Message) -> IoResult<Message> {
    let mut up = TcpStream::connect(upstream).await?;
    up.write_all(&req.encode()).await?;
    let mut r = Reader {
        conn: &mut up,
        buf: Vec::new(),
    };
    let (start, headers) = r.head().await?.ok_or_else(|| bad("upstream closed"))?;
    let mut msg = Message {
        start,
        headers,
        body: Vec::new(),
    };
    let status: u16 = msg
        .start
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let head_request = req.start.starts_with("HEAD ");
    if !head_request && status != 204 && status != 304 {
        r.body(&mut msg, true).await?;
    }
    Ok(msg)
}

fn canned(service: &'static str, fault: ProxyFault) -> Vec<u8> {
    let (status, ctype, body) = match (service, fault) {
        ("dynamodb", ProxyFault::Throttle | ProxyFault::Outage) => (
            "400 Bad Request",
            "application/x-amz-json-1.0",
            r#"{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate of requests exceeds the allowed throughput."}"#.to_owned(),
        ),
        ("dynamodb", _) => (
            "500 Internal Server Error",
            "application/x-amz-json-1.0",
            r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"Internal server error"}"#.to_owned(),
        ),
        (_, ProxyFault::Throttle | ProxyFault::Outage) => (
            "503 Slow Down",
            "application/xml",
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><RequestId>tp-fault</RequestId></Error>".to_owned(),
        ),
        _ => (
            "500 Internal Server Error",
            "application/xml",
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>InternalError</Code><Message>We encountered an internal error. Please try again.</Message><RequestId>tp-fault</RequestId></Error>".to_owned(),
        ),
    };
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\nx-amzn-requestid: tp-fault\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn draw(plan: &ProxyPlan, rng: &Mutex<SplitMix64>) -> (Option<ProxyFault>, f64) {
    let (u, v) = rng
        .lock()
        .map(|mut r| (r.unit(), r.unit()))
        .unwrap_or((1.0, 0.0));
    let mut edge = 0.0;
    for (rate, fault) in [
        (plan.throttle, ProxyFault::Throttle),
        (plan.server_error, ProxyFault::ServerError),
        (plan.drop_before, ProxyFault::DropBefore),
        (plan.drop_after, ProxyFault::DropAfter),
        (plan.delay, ProxyFault::Delay),
    ] {
        edge += rate;
        if u < edge {
            return (Some(fault), v);
        }
    }
    (None, v)
}

async fn serve(
    mut conn: TcpStream,
    upstream: SocketAddr,
    plan: ProxyPlan,
    stats: &ProxyStats,
    sw: &Switches,
) -> IoResult<()> {
    let Some(req) = read_request(&mut conn).await? else {
        return Ok(());
    };
    let service = if req.header("x-amz-target").is_some() {
        "dynamodb"
    } else {
        "s3"
    };
    if let Ok(mut m) = stats.requests.lock() {
        *m.entry(service).or_default() += 1;
    }
    let (fault, v) = if sw.outage.load(Ordering::SeqCst) {
        (Some(ProxyFault::Outage), 0.0)
    } else if let Some(f) = sw.take_next() {
        (Some(f), 0.5)
    } else if sw.enabled.load(Ordering::SeqCst) {
        draw(&plan, &sw.rng)
    } else {
        (None, 0.0)
    };
    if let Some(f) = fault
        && let Ok(mut m) = stats.faults.lock()
    {
        let op = match req.header("x-amz-target") {
            Some(t) => t.rsplit('.').next().unwrap_or(t).to_owned(),
            None => req.start.split(' ').next().unwrap_or("").to_owned(),
        };
        *m.entry((f, format!("{service} {op}"))).or_default() += 1;
    }
    match fault {
        Some(f @ (ProxyFault::Throttle | ProxyFault::ServerError | ProxyFault::Outage)) => {
            conn.write_all(&canned(service, f)).await?;
            conn.shutdown().await?;
            return Ok(());
        }
        // Dropping the stream closes the connection with no answer.
        Some(ProxyFault::DropBefore) => return Ok(()),
        Some(ProxyFault::Delay) => tokio::time::sleep(plan.max_delay.mul_f64(v)).await,
        Some(ProxyFault::DropAfter) | None => {}
    }
    let resp = forward(upstream, &req).await?;
    if fault == Some(ProxyFault::DropAfter) {
        return Ok(());
    }
    conn.write_all(&resp.encode()).await?;
    conn.shutdown().await?;
    Ok(())
}
