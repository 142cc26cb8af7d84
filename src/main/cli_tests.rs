//! Tests of the command line: `run` and `machine exec` parsed alone as
//! the whole command line parses them.

use super::*;

/// What a parsed `run` or `machine exec` holds, as text.
fn summary(cli: &Cli) -> String {
    let (head, c) = match &cli.command {
        Command::Run(RunArgs { socket, command }) => (format!("run {socket:?}"), command),
        Command::Machine {
            action:
                MachineAction::Exec(ExecArgs {
                    target,
                    start,
                    command,
                }),
        } => (
            format!("exec {:?} {:?} {start}", target.id, target.connect),
            command,
        ),
        _ => return "another command".to_string(),
    };
    format!(
        "{head} key {:?} folder {:?} timeout {:?} env {:?} shell {:?} flags {} {} {} {} tag {:?} argv {:?}",
        cli.key_file, c.folder, c.timeout, c.env, c.shell, c.interactive, c.tty,
        c.keep_background, c.detach, c.tag, c.argv
    )
}

#[test]
fn run_and_exec_parse_alone_as_the_whole_command_line_does() {
    let cases: [&[&str]; 8] = [
        &["run", "--", "true"],
        &[
            "run",
            "--socket",
            "/s",
            "--timeout",
            "2.5",
            "--env",
            "A=b",
            "--",
            "ls",
            "-l",
        ],
        &[
            "run",
            "--key-file",
            "/k",
            "--folder",
            "w/x",
            "--shell",
            "echo hi",
        ],
        &[
            "run",
            "-i",
            "--keep-background",
            "--detach",
            "--tag",
            "t",
            "--",
            "cat",
        ],
        &["machine", "exec", "demo", "--", "id"],
        &[
            "machine",
            "exec",
            "--connect",
            "127.0.0.1:7000",
            "--key-file",
            "/k",
            "--",
            "id",
        ],
        &[
            "machine", "exec", "demo", "--start", "--env", "A=b", "--", "env",
        ],
        &["--key-file", "/k", "run", "--", "true"],
    ];
    for case in cases {
        let args: Vec<std::ffi::OsString> = std::iter::once("warden")
            .chain(case.iter().copied())
            .map(Into::into)
            .collect();
        let alone = parse_from(args.clone()).unwrap();
        let whole = Cli::try_parse_from(args).unwrap();
        assert_eq!(summary(&alone), summary(&whole), "{case:?}");
        assert_ne!(summary(&alone), "another command", "{case:?}");
    }
}

#[test]
fn run_and_exec_alone_refuse_what_the_whole_command_line_refuses() {
    let cases: [&[&str]; 5] = [
        &["run", "--bogus"],
        &["run", "--shell", "x", "--", "y"],
        &["run", "--tag", "t", "--", "y"],
        &["machine", "exec", "--", "id"],
        &["machine", "exec", "a", "--connect", "h:1", "--", "id"],
    ];
    for case in cases {
        let args: Vec<std::ffi::OsString> = std::iter::once("warden")
            .chain(case.iter().copied())
            .map(Into::into)
            .collect();
        assert!(parse_from(args.clone()).is_err(), "{case:?}");
        assert!(Cli::try_parse_from(args).is_err(), "{case:?}");
    }
}
