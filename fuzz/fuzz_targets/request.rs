//! A control frame's payload, as warden parses it: JSON into a request,
//! then the run checks (folder, environment, argv). Never panics; a run
//! that passes the checks names a folder inside the workspace.
#![no_main]
use libfuzzer_sys::fuzz_target;
use warden::wire::Request;

fuzz_target!(|data: &[u8]| {
    let Ok(request) = serde_json::from_slice::<Request>(data) else {
        return;
    };
    if let Request::Run(run) = request {
        if let Ok(valid) = warden::guest::command::request::validate(run) {
            for part in valid.folder.iter().flatten() {
                assert!(!part.is_empty() && part != "." && part != ".." && !part.contains('/'));
            }
            assert!(!valid.argv.is_empty());
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = warden::guest::command::request::parse_signal(text);
        let _ = warden::guest::command::request::parse_folder(text);
    }
});
