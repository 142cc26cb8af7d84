//! A run's card end to end: warden as PID 1, a run begun through the API,
//! two commands in it (one that fails, one its timeout stops), the run
//! ended; then the API's card, and its page (spend::card_render::html)
//! opened in headless Chromium: a screenshot, the page's text as the
//! browser read it, and not one request leaving the page (Chromium's net
//! log, with every name resolving to nothing).

mod common;

use common::{privileged, skipped, text, Machine, Options};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use warden::shared::spend::card_render;
use warden::wire::client::Client;
use warden::wire::RunRequest;

/// Headless Chromium, where it is installed; under CI=true its absence
/// fails (scripts/test installs Debian's `chromium`).
fn chromium(test: &str) -> Option<&'static str> {
    let found = ["chromium", "chromium-browser"].into_iter().find(|name| {
        Command::new(name)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if found.is_none() {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{test}: chromium is not installed, and CI=true forbids skipping");
        }
        skipped(&format!(
            "{test}: needs chromium (apt-get install chromium)"
        ));
    }
    found
}

/// Runs Chromium headless on `page` with `args`, its names all resolving
/// to nothing and its net log written to `net_log`; stdout, or why not.
fn browse(
    browser: &str,
    page: &Path,
    dir: &Path,
    net_log: &Path,
    args: &[&str],
) -> Result<String, String> {
    let profile = tempfile::tempdir_in(dir).unwrap();
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--host-resolver-rules=MAP * ~NOTFOUND",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--log-net-log={}", net_log.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{browser}: {e}"))?;
    // Read both pipes on threads: a full pipe would stall the browser.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut s).ok();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut s).ok();
        s
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{browser} did not finish within 120 s"));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    match status.success() {
        true => Ok(text(&out)),
        false => Err(format!("{browser}: {status}\n{}", text(&err))),
    }
}

/// The URLs the page asked for, from Chromium's net log: every request
/// started with an initiator (the browser's own, for its updates and the
/// like, have none: "not an origin").
fn page_requests(net_log: &Path) -> Vec<String> {
    let mut log = std::fs::read_to_string(net_log).unwrap_or_default();
    // A log cut short at the end still reads, closed by hand.
    let parsed: Value = serde_json::from_str(&log).unwrap_or_else(|_| {
        log.truncate(log.trim_end().trim_end_matches(',').len());
        serde_json::from_str(&(log.clone() + "]}")).expect("chromium's net log")
    });
    parsed["events"]
        .as_array()
        .expect("net log events")
        .iter()
        .filter_map(|e| {
            let p = &e["params"];
            let initiator = p["initiator"].as_str()?;
            (initiator != "not an origin").then(|| format!("{} (from {initiator})", p["url"]))
        })
        .collect()
}

/// The text of a DOM as Chromium serialised it: tags dropped, the few
/// entities the renderer writes read back.
fn dom_text(dom: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in dom.chars() {
        match (c, in_tag) {
            ('<', _) => in_tag = true,
            ('>', true) => {
                in_tag = false;
                out.push(' ');
            }
            (c, false) => out.push(c),
            _ => {}
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

#[test]
fn a_run_s_card_lists_its_commands_and_renders_as_a_page_that_reaches_nothing() {
    let test = "a_run_s_card_lists_its_commands_and_renders_as_a_page_that_reaches_nothing";
    if !privileged(test) {
        return;
    }
    let Some(browser) = chromium(test) else {
        return;
    };
    let m = Machine::boot(Options::default());
    let mut client = m.client();
    a_run_with_a_failing_and_a_stopped_command(&mut client);
    let card = the_apis_card_says_how_each_command_ended(&mut client);

    // As text, for a terminal.
    let plain = card_render::text(&card);
    for want in [
        "run card-run  (ended)",
        "spent  $0.000000 of a $0.250000 budget (0.0%)",
        "exit 3",
        "killed: timeout limit",
        "sleep 30",
    ] {
        assert!(plain.contains(want), "text lacks {want:?}:\n{plain}");
    }

    // As a page, in a browser. Kept where cargo keeps tests' files, to be
    // looked at.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("card");
    std::fs::create_dir_all(&dir).unwrap();
    the_page_reaches_nothing_and_reads_as_the_card(browser, &dir, &card);
    the_net_logs_check_sees_a_page_that_reaches_out(browser, &dir);
}

/// The run card-run, with a budget of $0.25: a command that fails (its
/// argv holds markup, as an agent's may) and one its timeout stops; then
/// ended.
fn a_run_with_a_failing_and_a_stopped_command(client: &mut Client) {
    assert_eq!(client.begin_run("card-run", Some(0.25)).unwrap(), 250_000);
    // A command that fails (its argv holds markup, as an agent's may) and
    // one its timeout stops.
    let failing = RunRequest {
        shell: Some("echo '<script>alert(1)</script>'; exit 3".into()),
        ..Default::default()
    };
    let out = client.run(failing).unwrap();
    assert_eq!(out.exit.code, Some(3), "{:?}", out.exit);
    let slow = RunRequest {
        argv: Some(vec!["sleep".into(), "30".into()]),
        timeout_ms: Some(300),
        ..Default::default()
    };
    let out = client.run(slow).unwrap();
    assert_eq!(out.exit.limit.as_deref(), Some("timeout"), "{:?}", out.exit);
    let (spent, how) = client.end_run("card-run").unwrap();
    assert_eq!((spent, how.as_str()), (0, "ended"));
}

/// The API's card: both commands, how each ended, no spend.
fn the_apis_card_says_how_each_command_ended(client: &mut Client) -> Value {
    let card = client.card("card-run").unwrap();
    assert_eq!(card["how"], "ended", "{card}");
    assert_eq!(card["spent_micro_usd"], 0, "{card}");
    assert_eq!(card["budget_micro_usd"], 250_000, "{card}");
    assert!(card["ended"].is_string(), "{card}");
    let commands = card["commands"].as_array().unwrap();
    assert_eq!(commands.len(), 2, "{card}");
    assert_eq!(commands[0]["exit"], 3, "{card}");
    assert!(
        commands[0]["argv"].to_string().contains("<script>"),
        "{card}"
    );
    assert_eq!(commands[1]["argv"][0], "sleep", "{card}");
    assert_eq!(commands[1]["limit"], "timeout", "{card}");
    assert!(
        commands[1]["duration_ms"].as_f64().unwrap() >= 300.0,
        "{card}"
    );
    assert_eq!(card["models"].as_array().unwrap().len(), 0, "{card}");
    // A run not begun has no card.
    assert!(client.card("never").is_err());
    card
}

/// The card as a page in `dir`: nothing in it points outside it; its
/// screenshot and its text as Chromium read it, with no request made.
fn the_page_reaches_nothing_and_reads_as_the_card(browser: &str, dir: &Path, card: &Value) {
    let page = dir.join("run-card.html");
    let html = card_render::html(card);
    std::fs::write(&page, &html).unwrap();
    // Nothing in it points outside it.
    for outside in [
        "http://", "https://", "src=", "href=", "url(", "@import", "<script", "<link",
    ] {
        assert!(!html.contains(outside), "{outside} in the page");
    }
    let shot = dir.join("run-card.png");
    let _ = std::fs::remove_file(&shot);
    let net_log = dir.join("net-log-shot.json");
    browse(
        browser,
        &page,
        dir,
        &net_log,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1200,900",
        ],
    )
    .unwrap();
    let png = std::fs::read(&shot).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(png.len() > 20_000, "a screenshot of {} bytes", png.len());
    assert_eq!(page_requests(&net_log), Vec::<String>::new());

    let net_log = dir.join("net-log-dom.json");
    let dom = browse(browser, &page, dir, &net_log, &["--dump-dom"]).unwrap();
    assert_eq!(page_requests(&net_log), Vec::<String>::new());
    // The markup in the argv stayed text: the browser made no script of it.
    assert!(!dom.contains("<script"), "{dom}");
    let read = dom_text(&dom);
    for want in [
        "card-run",
        "$0.000000",
        "0.0% of a $0.250000 budget",
        "exit 3",
        "killed: timeout limit",
        "<script>alert(1)</script>",
        "sleep 30",
        "Commands (2)",
        "Timeline",
    ] {
        assert!(
            read.contains(want),
            "the page's text lacks {want:?}:\n{read}"
        );
    }
}

/// The net log's check sees a page that does reach out.
fn the_net_logs_check_sees_a_page_that_reaches_out(browser: &str, dir: &Path) {
    let leaky = dir.join("leaky.html");
    std::fs::write(
        &leaky,
        r#"<html><body><img src="https://leak.example.test/x.png"></body></html>"#,
    )
    .unwrap();
    let net_log = dir.join("net-log-leaky.json");
    browse(browser, &leaky, dir, &net_log, &["--dump-dom"]).unwrap();
    let asked = page_requests(&net_log);
    assert!(
        asked.iter().any(|u| u.contains("leak.example.test")),
        "{asked:?}"
    );
}
