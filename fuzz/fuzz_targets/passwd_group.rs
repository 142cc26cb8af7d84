//! /etc/passwd and /etc/group parsers, and the decision built on them:
//! never panic, and never plan to add a user whose uid is taken.
#![no_main]
use libfuzzer_sys::fuzz_target;
use warden::shared::config::UserSpec;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let passwd = warden::guest::accounts::users::parse_passwd(text);
    let groups = warden::guest::accounts::users::parse_group(text);
    let spec = UserSpec {
        name: "shell".into(),
        uid: 2001,
        gid: 2001,
        home: "/home/shell".into(),
    };
    if let Ok(plan) = warden::guest::accounts::users::plan(&spec, &passwd, &groups) {
        if plan.passwd_line.is_some() {
            assert!(passwd.iter().all(|p| p.uid != 2001 && p.name != "shell"));
        }
    }
});
