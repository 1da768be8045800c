//! llama.cpp's server for tests/llama.rs: the xllamacpp wheel's build (scripts/setup.sh puts it
//! in data/venv-llama) started on 127.0.0.1 by tests/llama/serve.py, with the tiny random-weight
//! model and vision projector the tests write (tests/llama/make_model.py, make_mmproj.py);
//! killed with -9 when dropped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn python() -> PathBuf {
    let p = repo().join("data/venv-llama/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run ./scripts/setup.sh (it installs llama.cpp's server, xllamacpp, for these tests)",
        p.display()
    );
    p
}

/// The tiny model, written into `dir`.
pub(crate) fn model(dir: &Path) -> PathBuf {
    written_by("make_model.py", dir.join("tiny.gguf"))
}

/// llama.cpp's server on a free port serving the tiny model, written into `dir` (its log:
/// `dir`/server.log), with serve.py's `args` (`--ctx N`, `--mmproj FILE`).
pub(crate) fn tiny_server(dir: &Path, args: &[&str]) -> Llama {
    let m = model(dir);
    Llama::start_with(&m, crate::util::free_port(), &dir.join("server.log"), args)
}

/// The tiny model's vision projector, written into `dir`: with it the server takes images.
pub(crate) fn mmproj(dir: &Path) -> PathBuf {
    written_by("make_mmproj.py", dir.join("tiny-mmproj.gguf"))
}

/// `file`, as tests/llama/`script` writes it.
fn written_by(script: &str, file: PathBuf) -> PathBuf {
    let o = Command::new(python())
        .arg(repo().join("tests/llama").join(script))
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    file
}

/// llama.cpp's server on 127.0.0.1:`port`; killed (-9) when dropped. Its log is in `log`.
pub(crate) struct Llama {
    child: Child,
    pub(crate) port: u16,
    log: PathBuf,
}

impl Llama {
    pub(crate) fn start(model: &Path, port: u16, log: &Path) -> Llama {
        Self::start_with(model, port, log, &[])
    }

    /// With more of serve.py's arguments (`--ctx N`).
    pub(crate) fn start_with(model: &Path, port: u16, log: &Path, args: &[&str]) -> Llama {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let child = Command::new(python())
            .arg(repo().join("tests/llama/serve.py"))
            .arg(model)
            .arg(port.to_string())
            .args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        let mut s = Llama {
            child,
            port,
            log: log.to_path_buf(),
        };
        s.wait_healthy();
        s
    }

    /// Until /health answers 200 (it answers 503 while the model loads).
    fn wait_healthy(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if get(self.port, "/health").is_some_and(|(code, _)| code == 200) {
                return;
            }
            if let Some(st) = self.child.try_wait().unwrap() {
                panic!("llama.cpp's server exited ({st}): {}", self.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "llama.cpp's server not healthy: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Requests the server has finished, by its own log.
    pub(crate) fn answered(&self) -> usize {
        self.log_text().matches("stop processing").count()
    }

    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Llama {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A plain HTTP/1.0 GET: the status code and body, or None when nothing answers.
pub(crate) fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    Some((code, body))
}
