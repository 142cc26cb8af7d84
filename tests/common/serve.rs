//! What the tests of sleeping and waking machines share: a runtime whose
//! page counts its requests and its running time (so that a freeze shows
//! as time it did not count), a `warden machine serve` of the test's own,
//! and a wait for a machine's state.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The runtime: a page on port 3000 that counts its requests in memory,
/// and counts time in tenths of a second while it runs (`ticks`), so that
/// a freeze shows as time it did not count.
pub const RUNTIME: &str = r#"cd /tmp && exec python3 -c '
import http.server, threading, time
n = [0, 0]
def tick():
    while True:
        time.sleep(0.1); n[1] += 1
threading.Thread(target=tick, daemon=True).start()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        n[0] += 1
        body = ("count %d ticks %d\n" % (n[0], n[1])).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("0.0.0.0", 3000), H).serve_forever()
'"#;

/// A serve of the test's own, killed at the end.
pub struct Serving(Child);

impl Drop for Serving {
    fn drop(&mut self) {
        // TERM first: runuser passes it on to the owner's serve.
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `command` (a `warden machine serve`) and waits until it holds
/// its lock (its first line said).
pub fn serving(mut command: Command) -> Serving {
    let log = tempfile::NamedTempFile::new().unwrap();
    let child = command
        .stdin(Stdio::null())
        .stdout(log.reopen().unwrap())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    let serving = Serving(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(log.path())
        .unwrap_or_default()
        .contains("fronting")
    {
        assert!(
            Instant::now() < deadline,
            "serve did not start: {}",
            std::fs::read_to_string(log.path()).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    serving
}

/// Waits (at most a minute) until `state()` says `want`.
pub fn wait_for(what: &str, want: &str, state: &dyn Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = state();
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still {now:?}, not {want:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// `count N ticks T` from the runtime's page.
pub fn page(ask: &dyn Fn() -> Result<String, String>) -> (u64, u64) {
    let said = ask().expect("the runtime's page");
    let words: Vec<&str> = said.split_whitespace().collect();
    match words.as_slice() {
        ["count", n, "ticks", t] => (n.parse().unwrap(), t.parse().unwrap()),
        _ => panic!("not the runtime's page: {said:?}"),
    }
}

/// The runtime's next answer, asked after a freeze of 3 s at least that
/// began after its answer `before` (asked at `asked`): its memory was kept
/// (its count is 2), and its processes stood still while frozen (between
/// the two answers it counted less time than passed, by about that).
pub fn kept_and_stood_still(ask: &dyn Fn() -> Result<String, String>, before: u64, asked: Instant) {
    let (count, after) = page(ask);
    assert_eq!(count, 2, "the runtime's memory was kept");
    let counted = (after - before) as f64 / 10.0;
    let passed = asked.elapsed().as_secs_f64();
    assert!(
        counted + 2.0 < passed,
        "counted {counted:.1} s of {passed:.1} s"
    );
}
