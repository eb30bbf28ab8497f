//! A small W3C WebDriver client for headless Chromium through Debian's `chromedriver`: start a
//! session, open a page, run a script in it, take a screenshot. Plain HTTP/1.1 on loopback.
//!
//! Needs `chromium` and `chromium-driver` (`.ci/run` installs them); without them
//! `Browser::start` returns `None` and the test says it skipped, unless
//! `ALLOT_REQUIRE_BROWSER=1` (CI), where that is a failure.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub struct Browser {
    driver: Child,
    addr: String,
    session: String,
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// One request; the answer's JSON (WebDriver answers every command with `{"value": ...}`).
fn request(addr: &str, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| e.to_string())?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| e.to_string())?;
    // chromedriver keeps the connection open: read the head, then Content-Length bytes.
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!(
                "{method} {path}: the connection closed before an answer"
            ));
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_string();
    let length = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .ok_or_else(|| format!("{method} {path}: no Content-Length in {head}"))?;
    let mut body = raw[head_end + 4..].to_vec();
    while body.len() < length {
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&buf[..n]);
    }
    let rest = String::from_utf8_lossy(&body).to_string();
    let v: Value = serde_json::from_str(&rest).map_err(|e| format!("{e}: {rest}"))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("{method} {path}: {head}: {v}"));
    }
    Ok(v["value"].clone())
}

impl Browser {
    pub fn start(test: &str) -> Option<Browser> {
        let required = std::env::var("ALLOT_REQUIRE_BROWSER").is_ok_and(|v| v == "1");
        let missing: Vec<&str> = ["chromium", "chromedriver"]
            .into_iter()
            .filter(|t| !have(t))
            .collect();
        if !missing.is_empty() {
            let why = format!(
                "{test}: skipped: needs Debian's chromium and chromium-driver (missing: {missing:?})"
            );
            assert!(!required, "{why}");
            eprintln!("{why}");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let addr = format!("127.0.0.1:{port}");
        let t = Instant::now();
        while request(&addr, "GET", "/status", None).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "chromedriver did not answer"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                // As root Chromium needs --no-sandbox.
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,1000"]
            }
        }}});
        let mut b = Browser {
            driver,
            addr,
            session: String::new(),
        };
        let v = request(&b.addr, "POST", "/session", Some(&caps)).expect("a browser session");
        b.session = v["sessionId"].as_str().expect("session id").to_string();
        Some(b)
    }

    fn cmd(&self, method: &str, what: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}/{what}", self.session);
        request(&self.addr, method, &path, body.as_ref())
            .unwrap_or_else(|e| panic!("webdriver {what}: {e}"))
    }

    pub fn open(&self, url: &str) {
        self.cmd("POST", "url", Some(json!({ "url": url })));
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns what it returns.
    pub fn run(&self, script: &str, args: Value) -> Value {
        self.cmd(
            "POST",
            "execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
    }

    /// The text of the element with this id, once there is one with some text (the page draws
    /// after its data comes), or panics after `secs` with the page's text.
    pub fn text_of(&self, id: &str, secs: u64) -> String {
        let t = Instant::now();
        loop {
            let v = self.run(
                "const e = document.getElementById(arguments[0]); return e ? e.innerText : null;",
                json!([id]),
            );
            if let Some(s) = v.as_str().filter(|s| !s.trim().is_empty()) {
                return s.to_string();
            }
            if t.elapsed() > Duration::from_secs(secs) {
                panic!(
                    "no element #{id} after {secs}s; the page says:\n{}",
                    self.page_text()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn page_text(&self) -> String {
        self.run("return document.body.innerText;", json!([]))
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Saves a PNG of the window.
    pub fn screenshot(&self, path: &Path) {
        let v = self.cmd("GET", "screenshot", None);
        use base64::Engine;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("a screenshot"))
            .expect("a base64 screenshot");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("artifact dir");
        }
        std::fs::write(path, png).expect("screenshot written");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = request(
                &self.addr,
                "DELETE",
                &format!("/session/{}", self.session),
                None,
            );
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
