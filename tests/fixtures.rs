//! The protocol's recorded exchanges, shared with the Node and Python
//! clients (`clients/fixtures`): every frame in them is what the Rust
//! types say warden and its clients send, and the Rust client, replayed
//! against each exchange it can make, sends exactly the recorded frames
//! and makes of warden's answers what the fixture says.

use base64::Engine;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use warden::wire::client::{Client, ClientError};
use warden::wire::{Event, Request, RunRequest, HEADER_LEN};

fn fixtures() -> Vec<(PathBuf, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/fixtures");
    let mut all: Vec<(PathBuf, Value)> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            let v = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            (p, v)
        })
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(
        all.len() >= 15,
        "the fixtures are missing: {}",
        dir.display()
    );
    all
}

fn kind_byte(kind: &str) -> u8 {
    match kind {
        "control" => 1,
        "stdout" => 2,
        "stderr" => 3,
        "stdin" => 4,
        other => panic!("unknown frame kind {other}"),
    }
}

fn payload(frame: &Value) -> Vec<u8> {
    match (&frame["json"], &frame["base64"]) {
        (Value::Null, Value::String(b)) => {
            base64::engine::general_purpose::STANDARD.decode(b).unwrap()
        }
        (json, _) => serde_json::to_vec(json).unwrap(),
    }
}

/// Request fields a fixture does not pin: the client's name, and the key
/// unless the fixture records one.
fn comparable(mut v: Value, keep_key: bool) -> Value {
    if let Value::Object(map) = &mut v {
        map.remove("client");
        if !keep_key {
            map.remove("key");
        }
    }
    v
}

#[test]
fn every_recorded_frame_is_what_the_types_say() {
    for (path, fixture) in fixtures() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        for frame in fixture["frames"].as_array().unwrap() {
            if frame["kind"] != "control" {
                assert!(frame["base64"].is_string(), "{name}: {frame}");
                continue;
            }
            let json = frame["json"].to_string();
            match frame["from"].as_str() {
                Some("warden") => {
                    let event: Event = serde_json::from_str(&json)
                        .unwrap_or_else(|e| panic!("{name}: warden's {json}: {e}"));
                    // ...and it is written back the same way.
                    assert_eq!(
                        serde_json::to_value(&event).unwrap(),
                        frame["json"],
                        "{name}"
                    );
                }
                // A fixture may record a request warden refuses (an
                // unknown field): it need not parse.
                Some("client") if fixture["error"]["code"] == "bad_request" => {}
                Some("client") => {
                    serde_json::from_str::<Request>(&json)
                        .unwrap_or_else(|e| panic!("{name}: client's {json}: {e}"));
                }
                other => panic!("{name}: from {other:?}"),
            }
        }
    }
}

/// Plays warden's side of `frames` on `listener`: checks each client frame
/// against the record, writes each of warden's.
fn fake_warden(listener: UnixListener, frames: Vec<Value>, keep_key: bool) -> Result<(), String> {
    let (mut s, _) = listener.accept().map_err(|e| e.to_string())?;
    for frame in frames {
        let (kind, id) = (
            kind_byte(frame["kind"].as_str().unwrap()),
            frame["id"].as_u64().unwrap() as u32,
        );
        if frame["from"] == "warden" {
            let body = payload(&frame);
            let mut out = vec![kind];
            out.extend(id.to_be_bytes());
            out.extend((body.len() as u32).to_be_bytes());
            out.extend(body);
            s.write_all(&out).map_err(|e| e.to_string())?;
            continue;
        }
        let mut head = [0u8; HEADER_LEN];
        s.read_exact(&mut head)
            .map_err(|e| format!("reading {frame}: {e}"))?;
        let len = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) as usize;
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).map_err(|e| e.to_string())?;
        let got_id = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        if (head[0], got_id) != (kind, id) {
            return Err(format!(
                "frame kind/id {:?}, recorded {frame}",
                (head[0], got_id)
            ));
        }
        if kind == 1 {
            let got: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
            let (mut got, want) = (
                comparable(got, keep_key),
                comparable(frame["json"].clone(), keep_key),
            );
            // A newer client offers the recorded versions and newer ones
            // (a warden that answers the recorded one speaks it).
            if got["type"] == "hello" && want["type"] == "hello" {
                let (offered, recorded) = (&got["versions"], &want["versions"]);
                let (Some(offered), Some(recorded)) = (offered.as_array(), recorded.as_array())
                else {
                    return Err(format!("a hello without versions: {got}"));
                };
                if !offered.starts_with(recorded) {
                    return Err(format!("offered {offered:?}, recorded {recorded:?}"));
                }
                got["versions"] = want["versions"].clone();
            }
            if got != want {
                return Err(format!("sent {got}, recorded {want}"));
            }
        } else if body != payload(&frame) {
            return Err(format!("sent other bytes than {frame}"));
        }
    }
    Ok(())
}

/// What the Rust client makes of the exchange, as the fixture's `result`
/// or `error` would say it.
fn call(client: Result<Client, ClientError>, call: &Value) -> Result<Value, ClientError> {
    let mut c = client?;
    let args = call["args"].clone();
    Ok(match call["method"].as_str().unwrap() {
        "hello_only" => serde_json::to_value(Event::Hello {
            version: c.version,
            server: c.server.clone(),
        })
        .unwrap(),
        "run" => {
            let req: RunRequest = serde_json::from_value(args).unwrap();
            let out = c.run(req)?;
            let mut v = serde_json::to_value(Event::Exit(out.exit)).unwrap();
            let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
            v["stdout_base64"] = json!(b64(&out.stdout));
            v["stderr_base64"] = json!(b64(&out.stderr));
            v
        }
        "status" => serde_json::to_value(Event::Status(Box::new(c.status()?))).unwrap(),
        "reload" => serde_json::to_value(Event::Reloaded(c.reload()?)).unwrap(),
        "audit" => {
            let seq = c.audit(args["kind"].as_str().unwrap(), args["fields"].clone())?;
            serde_json::to_value(Event::Recorded { seq }).unwrap()
        }
        "stop_shell" => {
            let signal = args["signal"].as_str().unwrap_or("KILL");
            let (signalled, left) = c.stop_shell(signal)?;
            serde_json::to_value(Event::ShellStopped { signalled, left }).unwrap()
        }
        "hold" => {
            let until_ms = c.hold(args["until_ms"].as_u64().unwrap())?;
            serde_json::to_value(Event::Held { until_ms }).unwrap()
        }
        "list" => {
            c.send(0, &Request::List)?;
            match c.receive()? {
                warden::wire::client::Message::Event(0, event @ Event::Commands { .. }) => {
                    serde_json::to_value(event).unwrap()
                }
                warden::wire::client::Message::Event(0, Event::Error { code, message }) => {
                    return Err(ClientError::Warden { code, message })
                }
                other => panic!("list answered {other:?}"),
            }
        }
        "wait" => {
            // A wait takes the connection's first command id, as a run does.
            let command = args["command"].as_u64().unwrap();
            c.send(1, &Request::Wait { command })?;
            match c.receive()? {
                warden::wire::client::Message::Event(1, event @ Event::Exit(_)) => {
                    serde_json::to_value(event).unwrap()
                }
                warden::wire::client::Message::Event(1, Event::Error { code, message }) => {
                    return Err(ClientError::Warden { code, message })
                }
                other => panic!("wait answered {other:?}"),
            }
        }
        other => panic!("not replayed here: {other}"),
    })
}

#[test]
fn the_rust_client_replays_every_exchange_it_can_make() {
    let mut replayed = 0;
    for (path, fixture) in fixtures() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let call_spec = &fixture["call"];
        // What the Rust client has no call for: feeding stdin and
        // signalling from inside `run`, and sending a field it does not
        // know (its types refuse to).
        let method = call_spec["method"].as_str().unwrap();
        if call_spec.get("stdin_base64").is_some()
            || method == "signal_after_start"
            || name == "run_unknown_field.json"
        {
            eprintln!("{name}: not an exchange the Rust client makes");
            continue;
        }
        let frames = fixture["frames"].as_array().unwrap().clone();
        let key = frames[0]["json"]["key"].as_str().map(String::from);
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("api.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let keep_key = key.is_some();
        let warden = std::thread::spawn(move || fake_warden(listener, frames, keep_key));
        let client = Client::connect_keyed(&socket, key.as_deref(), None);
        let outcome = call(client, call_spec);
        let played = warden.join().unwrap();
        assert_eq!(
            played,
            Ok(()),
            "{name}: the client did not send what is recorded"
        );
        match (&fixture["result"], &fixture["error"], outcome) {
            (Value::Null, error, Err(ClientError::Warden { code, message })) => {
                assert_eq!(json!(code), error["code"], "{name}");
                let part = error["message_contains"].as_str().unwrap_or("");
                assert!(message.contains(part), "{name}: {message}");
            }
            (result, Value::Null, Ok(got)) => assert_eq!(&got, result, "{name}"),
            (_, _, other) => panic!("{name}: {other:?}"),
        }
        replayed += 1;
    }
    eprintln!("{replayed} exchanges replayed by the Rust client");
    assert!(replayed >= 10, "{replayed}");
}
