//! The `runtime` and `shell` users: read `/etc/passwd` and `/etc/group`
//! directly (a static binary has no NSS), add what is missing, and refuse
//! what conflicts.

use crate::shared::config::UserSpec;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswdEntry {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEntry {
    pub name: String,
    pub gid: u32,
    pub members: Vec<String>,
}

/// A user as warden runs processes under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Every group the user is in, primary first.
    pub groups: Vec<u32>,
    pub home: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum UsersError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Conflict(#[from] UserConflict),
}

/// Why the machine's users cannot be as the config says (nothing is
/// written then).
#[derive(Debug, thiserror::Error)]
pub enum UserConflict {
    #[error("group {name} exists with gid {found}, but the config says {wanted}")]
    GroupGid {
        name: String,
        found: u32,
        wanted: u32,
    },
    #[error("gid {gid} is taken by group {by}, but the config gives it to {name}")]
    GidTaken { gid: u32, by: String, name: String },
    #[error("user {name} exists as {uid}:{gid}, but the config says {wanted_uid}:{wanted_gid}")]
    UserIds {
        name: String,
        uid: u32,
        gid: u32,
        wanted_uid: u32,
        wanted_gid: u32,
    },
    #[error("uid {uid} is taken by user {by}, but the config gives it to {name}")]
    UidTaken { uid: u32, by: String, name: String },
    /// `group` as "name (gid)".
    #[error("/etc/group names {group} inside the command tags' range {first}-{last}: every command given that tag would be in it")]
    TagGroup {
        group: String,
        first: u32,
        last: u32,
    },
    #[error("{shell} is in group {group}, which {runtime} is in too: commands would reach what that group may (the API socket, the audit log)")]
    SharedGroup {
        shell: String,
        group: String,
        runtime: String,
    },
}

/// Parses passwd(5) text. Lines that are not seven fields with numeric ids
/// (comments, NIS `+` lines, damage) define no user and are skipped.
pub fn parse_passwd(text: &str) -> Vec<PasswdEntry> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            if f.len() != 7 || f[0].is_empty() {
                return None;
            }
            Some(PasswdEntry {
                name: f[0].to_string(),
                uid: f[2].parse().ok()?,
                gid: f[3].parse().ok()?,
                home: f[5].to_string(),
            })
        })
        .collect()
}

/// Parses group(5) text, skipping lines that are not four fields.
pub fn parse_group(text: &str) -> Vec<GroupEntry> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            if f.len() != 4 || f[0].is_empty() {
                return None;
            }
            Some(GroupEntry {
                name: f[0].to_string(),
                gid: f[2].parse().ok()?,
                members: f[3]
                    .split(',')
                    .filter(|m| !m.is_empty())
                    .map(String::from)
                    .collect(),
            })
        })
        .collect()
}

/// What must be appended so `spec` exists, or the conflict that forbids it.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    pub group_line: Option<String>,
    pub passwd_line: Option<String>,
}

/// Pure decision: given the current entries, what to add for `spec`.
pub fn plan(
    spec: &UserSpec,
    passwd: &[PasswdEntry],
    groups: &[GroupEntry],
) -> Result<Plan, UserConflict> {
    let group_line = match groups.iter().find(|g| g.name == spec.name) {
        Some(g) if g.gid != spec.gid => {
            return Err(UserConflict::GroupGid {
                name: spec.name.clone(),
                found: g.gid,
                wanted: spec.gid,
            })
        }
        Some(_) => None,
        None => {
            if let Some(other) = groups.iter().find(|g| g.gid == spec.gid) {
                return Err(UserConflict::GidTaken {
                    gid: spec.gid,
                    by: other.name.clone(),
                    name: spec.name.clone(),
                });
            }
            Some(format!("{}:x:{}:\n", spec.name, spec.gid))
        }
    };
    let passwd_line = match passwd.iter().find(|p| p.name == spec.name) {
        Some(p) if p.uid != spec.uid || p.gid != spec.gid => {
            return Err(UserConflict::UserIds {
                name: spec.name.clone(),
                uid: p.uid,
                gid: p.gid,
                wanted_uid: spec.uid,
                wanted_gid: spec.gid,
            })
        }
        Some(_) => None,
        None => {
            if let Some(other) = passwd.iter().find(|p| p.uid == spec.uid) {
                return Err(UserConflict::UidTaken {
                    uid: spec.uid,
                    by: other.name.clone(),
                    name: spec.name.clone(),
                });
            }
            Some(format!(
                "{}:x:{}:{}:warden {}:{}:/bin/sh\n",
                spec.name,
                spec.uid,
                spec.gid,
                spec.name,
                spec.home.display()
            ))
        }
    };
    Ok(Plan {
        group_line,
        passwd_line,
    })
}

/// The groups `name` belongs to: its primary group, then every group that
/// lists it as a member.
pub fn groups_of(name: &str, primary: u32, groups: &[GroupEntry]) -> Vec<u32> {
    let mut out = vec![primary];
    for g in groups {
        if g.members.iter().any(|m| m == name) && !out.contains(&g.gid) {
            out.push(g.gid);
        }
    }
    out
}

/// Pure: whether shell is kept out of the runtime's groups, and no group
/// is a command's tag; else why not, in one line. shell in a group of the
/// runtime's (its primary group, or one that lists it) would open what
/// that group may reach (the API socket, the audit log); a named group in
/// the tags' range would be every command's that gets that tag.
pub fn apart(
    runtime: &UserSpec,
    shell: &UserSpec,
    groups: &[GroupEntry],
    tags: std::ops::Range<u32>,
) -> Result<(), UserConflict> {
    let name = |gid: u32| {
        groups
            .iter()
            .find(|g| g.gid == gid)
            .map_or_else(|| gid.to_string(), |g| format!("{} ({gid})", g.name))
    };
    if let Some(g) = groups.iter().find(|g| tags.contains(&g.gid)) {
        return Err(UserConflict::TagGroup {
            group: name(g.gid),
            first: tags.start,
            last: tags.end - 1,
        });
    }
    let theirs = groups_of(&runtime.name, runtime.gid, groups);
    let shared = groups_of(&shell.name, shell.gid, groups)
        .into_iter()
        .find(|gid| theirs.contains(gid));
    match shared {
        Some(gid) => Err(UserConflict::SharedGroup {
            shell: shell.name.clone(),
            group: name(gid),
            runtime: runtime.name.clone(),
        }),
        None => Ok(()),
    }
}

/// Makes sure both users exist in `etc` (normally `/etc`), appending what is
/// missing. Appends, never rewrites: a line already there is never lost, and
/// the files may be bind mounts.
pub fn ensure(etc: &Path, specs: [&UserSpec; 2]) -> Result<[Account; 2], UsersError> {
    let passwd_path = etc.join("passwd");
    let group_path = etc.join("group");
    // Decide for both before writing anything: a conflict changes nothing.
    // (The config guarantees the two users differ in name, uid and gid, so
    // one's additions cannot conflict with the other's.)
    let passwd = parse_passwd(&read(&passwd_path)?);
    let groups = parse_group(&read(&group_path)?);
    let plans = specs
        .map(|spec| plan(spec, &passwd, &groups))
        .into_iter()
        .collect::<Result<Vec<Plan>, UserConflict>>()?;
    // The groups as they will be, checked before anything is written.
    let mut after = groups;
    after.extend(
        plans
            .iter()
            .flat_map(|p| parse_group(p.group_line.as_deref().unwrap_or(""))),
    );
    let [runtime, shell] = specs;
    apart(
        runtime,
        shell,
        &after,
        crate::guest::process::lifetime::TAGS,
    )?;
    for (spec, plan) in specs.iter().zip(plans) {
        if let Some(line) = &plan.group_line {
            append(&group_path, line)?;
            append_if_exists(&etc.join("gshadow"), &format!("{}:!::\n", spec.name))?;
        }
        if let Some(line) = &plan.passwd_line {
            append(&passwd_path, line)?;
            append_if_exists(&etc.join("shadow"), &format!("{}:!:1::::::\n", spec.name))?;
        }
    }
    let groups = parse_group(&read(&group_path)?);
    Ok(specs.map(|spec| Account {
        name: spec.name.clone(),
        uid: spec.uid,
        gid: spec.gid,
        groups: groups_of(&spec.name, spec.gid, &groups),
        home: spec.home.clone(),
    }))
}

fn read(path: &Path) -> Result<String, UsersError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(source) => Err(UsersError::Io {
            path: path.into(),
            source,
        }),
    }
}

fn append(path: &Path, line: &str) -> Result<(), UsersError> {
    let io = |source| UsersError::Io {
        path: path.into(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(io)?;
    // A file that does not end in a newline would glue our line to its last.
    let current = read(path)?;
    let text = if !current.is_empty() && !current.ends_with('\n') {
        format!("\n{line}")
    } else {
        line.to_string()
    };
    file.write_all(text.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)
}

fn append_if_exists(path: &Path, line: &str) -> Result<(), UsersError> {
    if path.exists() {
        append(path, line)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, uid: u32, gid: u32) -> UserSpec {
        UserSpec {
            name: name.into(),
            uid,
            gid,
            home: format!("/home/{name}").into(),
        }
    }

    #[test]
    fn passwd_parsing_table() {
        let text = "root:x:0:0:root:/root:/bin/bash\n\
                    # comment\n\
                    +nis\n\
                    bad:x:notanumber:0::/:/bin/sh\n\
                    short:x:1:1\n\
                    :x:5:5::/:/bin/sh\n\
                    runtime:x:2000:2000:warden runtime:/home/runtime:/bin/sh";
        let got = parse_passwd(text);
        assert_eq!(
            got,
            vec![
                PasswdEntry {
                    name: "root".into(),
                    uid: 0,
                    gid: 0,
                    home: "/root".into()
                },
                PasswdEntry {
                    name: "runtime".into(),
                    uid: 2000,
                    gid: 2000,
                    home: "/home/runtime".into()
                },
            ]
        );
    }

    #[test]
    fn group_parsing_table() {
        let text = "root:x:0:\nwheel:x:10:a,shell,\nbad:x:y:\nshell:x:2001:\n";
        let got = parse_group(text);
        assert_eq!(got.len(), 3);
        assert_eq!(got[1].members, vec!["a".to_string(), "shell".to_string()]);
        assert_eq!(groups_of("shell", 2001, &got), vec![2001, 10]);
        assert_eq!(groups_of("other", 7, &got), vec![7]);
    }

    #[test]
    fn plan_table() {
        let passwd = parse_passwd("root:x:0:0::/root:/bin/sh\nold:x:2000:2000::/:/bin/sh\n");
        let groups = parse_group("root:x:0:\nold:x:2000:\n");
        // (spec, Ok((adds group, adds user)) or Err(substring))
        type Want = Result<(bool, bool), &'static str>;
        let cases: Vec<(UserSpec, Want)> = vec![
            (spec("shell", 2001, 2001), Ok((true, true))),
            (spec("old", 2000, 2000), Ok((false, false))),
            (spec("old", 2002, 2000), Err("exists as 2000:2000")),
            (
                spec("old", 2000, 2003),
                Err("group old exists with gid 2000"),
            ),
            (
                spec("new", 2000, 2005),
                Err("uid 2000 is taken by user old"),
            ),
            (
                spec("new", 2005, 2000),
                Err("gid 2000 is taken by group old"),
            ),
        ];
        for (s, want) in cases {
            let got = plan(&s, &passwd, &groups);
            match (got, want) {
                (Ok(p), Ok((g, u))) => {
                    assert_eq!(
                        (p.group_line.is_some(), p.passwd_line.is_some()),
                        (g, u),
                        "{s:?}"
                    )
                }
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{s:?}: {e}"),
                (got, want) => panic!("{s:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn apart_table() {
        let (r, s) = (spec("runtime", 2000, 2000), spec("shell", 2001, 2001));
        let base = "root:x:0:\nruntime:x:2000:\nshell:x:2001:\n";
        // (lines added to /etc/group, Ok or Err(substring))
        let cases: [(&str, Result<(), &str>); 8] = [
            ("", Ok(())),
            ("users:x:100:\nnogroup:x:65534:\n", Ok(())),
            ("other:x:3000:shell\n", Ok(())),
            ("other:x:3000:runtime\n", Ok(())),
            (
                "run2:x:2000:shell\n",
                Err("shell is in group runtime (2000), which runtime"),
            ),
            (
                "both:x:3000:runtime,shell\n",
                Err("shell is in group both (3000)"),
            ),
            (
                "sh2:x:2001:runtime\n",
                Err("shell is in group shell (2001)"),
            ),
            (
                "tagged:x:60005:\n",
                Err("names tagged (60005) inside the command tags' range 60000-63999"),
            ),
        ];
        for (extra, want) in cases {
            let groups = parse_group(&format!("{base}{extra}"));
            let got = apart(&r, &s, &groups, 60_000..64_000);
            match (got, want) {
                (Ok(()), Ok(())) => {}
                (Err(e), Err(w)) => {
                    let e = e.to_string();
                    assert!(e.contains(w), "{extra:?}: {e}");
                    assert!(!e.contains('\n'), "one line: {e}");
                }
                (got, want) => panic!("{extra:?}: got {got:?}, want {want:?}"),
            }
        }
        // The tags' edges.
        for (gid, refused) in [
            (59_999, false),
            (60_000, true),
            (63_999, true),
            (64_000, false),
        ] {
            let groups = parse_group(&format!("{base}g:x:{gid}:\n"));
            assert_eq!(
                apart(&r, &s, &groups, 60_000..64_000).is_err(),
                refused,
                "{gid}"
            );
        }
    }

    #[test]
    fn ensure_refuses_shell_in_the_runtimes_group_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path();
        std::fs::write(etc.join("passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
        let group = "root:x:0:\nruntime:x:2000:shell\n";
        std::fs::write(etc.join("group"), group).unwrap();
        let (r, s) = (spec("runtime", 2000, 2000), spec("shell", 2001, 2001));
        let e = ensure(etc, [&r, &s]).unwrap_err().to_string();
        assert!(e.contains("shell is in group runtime (2000)"), "{e}");
        assert_eq!(std::fs::read_to_string(etc.join("group")).unwrap(), group);
        assert_eq!(
            std::fs::read_to_string(etc.join("passwd")).unwrap(),
            "root:x:0:0::/root:/bin/sh\n"
        );
    }

    #[test]
    fn ensure_appends_once_and_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path();
        std::fs::write(etc.join("passwd"), "root:x:0:0::/root:/bin/sh").unwrap();
        std::fs::write(etc.join("group"), "root:x:0:\n").unwrap();
        std::fs::write(etc.join("shadow"), "root:*:1::::::\n").unwrap();
        let (r, s) = (spec("runtime", 2000, 2000), spec("shell", 2001, 2001));
        let first = ensure(etc, [&r, &s]).unwrap();
        let passwd_once = std::fs::read_to_string(etc.join("passwd")).unwrap();
        let second = ensure(etc, [&r, &s]).unwrap();
        assert_eq!(first, second);
        assert_eq!(
            std::fs::read_to_string(etc.join("passwd")).unwrap(),
            passwd_once
        );
        let users = parse_passwd(&passwd_once);
        assert_eq!(users.len(), 3, "{passwd_once}");
        assert_eq!(
            users[0].name, "root",
            "the unterminated last line stayed whole"
        );
        assert_eq!(first[1].groups, vec![2001]);
        let shadow = std::fs::read_to_string(etc.join("shadow")).unwrap();
        assert!(shadow.contains("shell:!:"), "{shadow}");
    }
}
