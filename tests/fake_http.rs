//! A small HTTP/1.1 server on 127.0.0.1 for the fake YouTube, OpenAI and Gemini APIs and for
//! download tests: it answers with whatever the test's handler returns and logs every request,
//! so tests can count calls. One thread per connection; every answer closes the connection.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Decoded query parameters (a repeated name keeps the last value).
    pub query: BTreeMap<String, String>,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl Request {
    /// The request without credentials: how tests tell a repeated call.
    pub fn identity(&self) -> String {
        let q: Vec<String> = self
            .query
            .iter()
            .filter(|(k, _)| k.as_str() != "key")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!(
            "{} {}?{} {}",
            self.method,
            self.path,
            q.join("&"),
            String::from_utf8_lossy(&self.body)
        )
    }
}

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Wait this long before answering (a slow server).
    pub delay: Duration,
}

impl Response {
    pub fn json(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            headers: vec![(
                "Content-Type".into(),
                "application/json; charset=UTF-8".into(),
            )],
            body: body.into(),
            delay: Duration::ZERO,
        }
    }
    pub fn bytes(status: u16, content_type: &str, body: Vec<u8>) -> Self {
        Self {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body,
            delay: Duration::ZERO,
        }
    }
    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }
    pub fn delayed(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }
}

type Handler = dyn Fn(&Request) -> Response + Send + Sync;

pub struct FakeServer {
    pub port: u16,
    log: Arc<Mutex<Vec<(Request, u16)>>>,
}

impl FakeServer {
    pub fn start(handler: impl Fn(&Request) -> Response + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let log: Arc<Mutex<Vec<(Request, u16)>>> = Arc::default();
        let handler: Arc<Handler> = Arc::new(handler);
        let log2 = log.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (handler, log) = (handler.clone(), log2.clone());
                std::thread::spawn(move || serve(conn, &*handler, &log));
            }
        });
        Self { port, log }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    /// Every request so far with the status it got.
    pub fn requests(&self) -> Vec<(Request, u16)> {
        self.log.lock().unwrap().clone()
    }

    pub fn count(&self, path_contains: &str) -> usize {
        self.requests()
            .iter()
            .filter(|(r, _)| r.path.contains(path_contains))
            .count()
    }

    /// Identities of successful requests that were made more than once.
    pub fn repeated_successes(&self) -> Vec<String> {
        let mut seen = std::collections::BTreeMap::<String, usize>::new();
        for (r, status) in self.requests() {
            if (200..300).contains(&status) {
                *seen.entry(r.identity()).or_default() += 1;
            }
        }
        seen.into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(k, _)| k)
            .collect()
    }
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let h = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(h, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn serve(conn: TcpStream, handler: &Handler, log: &Mutex<Vec<(Request, u16)>>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("/").to_string();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    if len > 0 && reader.read_exact(&mut body).is_err() {
        return;
    }
    let (path, qs) = target.split_once('?').unwrap_or((&target, ""));
    let query = qs
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect();
    let req = Request {
        method,
        path: path.to_string(),
        query,
        headers,
        body,
    };
    let resp = handler(&req);
    log.lock().unwrap().push((req, resp.status));
    std::thread::sleep(resp.delay);
    let mut out = conn;
    let mut head = format!(
        "HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        resp.status,
        resp.body.len()
    );
    for (k, v) in &resp.headers {
        head += &format!("{k}: {v}\r\n");
    }
    head += "\r\n";
    let _ = out.write_all(head.as_bytes());
    let _ = out.write_all(&resp.body);
    let _ = out.flush();
}

/// How many times a fake server has been asked about each key (a title, an image width): the
/// n-th call of a key, from 1, so a handler can fail the first and answer the next.
#[derive(Default)]
pub struct Calls<K>(Mutex<std::collections::HashMap<K, usize>>);

impl<K: std::hash::Hash + Eq> Calls<K> {
    pub fn nth(&self, key: K) -> usize {
        let mut m = self.0.lock().unwrap();
        let c = m.entry(key).or_default();
        *c += 1;
        *c
    }
}
